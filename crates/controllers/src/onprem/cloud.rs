//! [`InventoryCloud`]: a [`BareMetalCloud`] whose servers are Inventories, taken with
//! [`claims`] and reached through their BMCs by rufio Jobs, as provisioning reaches them.
//!
//! One `InventoryCloud` serves one owner's request shape: it is made with the Inventories'
//! label selector, the namespaces it may take them from, and the provisioning AddressPool its
//! servers' addresses come from ([`Settings`]), and, for a pool, the one owner tag it acts for:
//! another owner's servers are, to it, not there. `CreateServer.plan` and `location` are not read
//! (a cloud's plan and metro have no meaning here); the owner tag and the hostname are the
//! claim, and an iPXE `Boot` URL is recorded on the Inventory.
//!
//! What a create does, each step recorded on the Inventory before the next, so that a create
//! repeated after a crash or a lost answer finds what the first did:
//!
//! 1. The claim ([`claims::claim`]): the owner tag and hostname written under the
//!    `resourceVersion` read. A claim already held by (owner, hostname) is adopted instead.
//! 2. The address: [`allocate_address`] in the AddressPool, owner `{kind: inventory}` as
//!    provisioning writes it (idempotent for that owner), then recorded
//!    ([`ADDRESS_ANNOTATION`]).
//! 3. With an [`InstallRequest`] as the create's `userdata` (a pool's), the install files
//!    rendered for this Inventory and address, written to the claim's install Secret
//!    ([`install`]), which the boot server hands out; with an [`ImageRequest`] (a Gardener
//!    machine's), its OS image's script and NoCloud data, into the same Secret ([`image`]).
//! 4. The install boot: a rufio Job (power off, one-time PXE boot in the mode the server is in,
//!    power on; provisioning's boot tasks) named after the claim and the boot's number,
//!    created with [`power::create_once`] (one of that name already there is this boot, not
//!    sent again), then recorded ([`BOOTS_ANNOTATION`]). Once recorded it is never created
//!    again for that number: a create that adopts a booted claim sends nothing. Rufio's Task
//!    controller sends each action once and confirms it by reading the power state back.
//!
//! A delete powers the server off the same way (a Job named after the claim), waits until
//! that Job completed (its power off read back from the BMC) and the Machine reads `off`, and
//! records it ([`OFF_CONFIRMED_ANNOTATION`]); only then is the address freed, the install
//! Secret and the claim's Jobs deleted and the claim released ([`claims::release_with`], its annotations removed in the
//! same write). With [`WipePolicy::Metadata`], the power off waits for a wipe: the server
//! is booted once into the site's wipe image ([`wipe`]), a Job named after the claim, recorded
//! ([`WIPE_JOB_ANNOTATION`]), and only its report ([`WIPED_ANNOTATION`], written by the boot
//! server) lets the release go on; until then the claim, its address and its files stay.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ingot_api::rufio::{Job, Machine};
use ingot_api::seeder::{AddressPool, Cluster, Inventory, JOB_INVENTORY_LABEL};
use ingot_metal::{
    Address, BareMetalCloud, BootUpdate, CapacityLevel, CreateServer, Error, Location, NetworkMode,
    PlanInfo, Port, PortKind, PowerAction, Reinstall, Result, Server, ServerState, Shortage, Vlan,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::claims::{self, Claim, Claimed};
use super::image::{self, ImageRequest};
use super::install::{self, InstallRequest};
use super::size::{self, Fit, Minimum};
use super::wipe::{
    self, WIPE_JOB_ANNOTATION, WIPE_SCRIPT_KEY, WIPED_ANNOTATION, WipeAddress, WipeImage,
    WipePolicy,
};
use crate::provisioning::addresses::{PoolRef, allocate_address, release_address};
use crate::provisioning::allocation::inventory_owner;
use crate::provisioning::install::ADDRESS_KEY;
use crate::provisioning::ipam;
use crate::provisioning::node::phase::{BOOT_MEDIA_ANNOTATION, BootMedia, no_virtual_media};
use crate::seeder::power::{self, JobOutcome};

/// The server's address, while claimed.
pub const ADDRESS_ANNOTATION: &str = "onprem.ingot.dev/address";
/// The AddressPool (`namespace/name`) the address was taken from.
pub const ADDRESS_POOL_ANNOTATION: &str = "onprem.ingot.dev/address-pool";
/// How many install boots were sent under this claim (the Jobs `<...>-boot-<n>`).
pub const BOOTS_ANNOTATION: &str = "onprem.ingot.dev/boots";
/// The last install boot's Job.
pub const BOOT_JOB_ANNOTATION: &str = "onprem.ingot.dev/boot-job";
/// The iPXE script URL the owner asked the server to boot.
pub const IPXE_URL_ANNOTATION: &str = "onprem.ingot.dev/ipxe-script-url";
/// `true` once the release's power off was read back: the server is never sent it again.
pub const OFF_CONFIRMED_ANNOTATION: &str = "onprem.ingot.dev/off-confirmed";
/// The install boot number whose installer reported `SUCCEEDED` (the boot server writes it):
/// from then until the next boot, the server boots its disk.
pub const INSTALLED_ANNOTATION: &str = "onprem.ingot.dev/installed";
/// On every Job sent under a claim: a hash of the claim, so its release deletes them all.
pub const CLAIM_JOB_LABEL: &str = "onprem.ingot.dev/claim";
/// `cd` when the last install boot was from ingot's boot CD (absent: by network).
pub const BOOTED_FROM_ANNOTATION: &str = "onprem.ingot.dev/booted-from";
/// The install boot number whose boot CD was ejected once it reported.
pub const EJECTED_ANNOTATION: &str = "onprem.ingot.dev/ejected";
/// The create's tags besides the owner's (a JSON list), reported as the server's tags.
pub const TAGS_ANNOTATION: &str = "onprem.ingot.dev/tags";

/// Every annotation this cloud writes besides the claim's own: removed with the claim.
const RECORDS: [&str; 11] = [
    WIPE_JOB_ANNOTATION,
    WIPED_ANNOTATION,
    TAGS_ANNOTATION,
    ADDRESS_ANNOTATION,
    INSTALLED_ANNOTATION,
    ADDRESS_POOL_ANNOTATION,
    BOOTS_ANNOTATION,
    BOOT_JOB_ANNOTATION,
    IPXE_URL_ANNOTATION,
    BOOTED_FROM_ANNOTATION,
    EJECTED_ANNOTATION,
];

/// What a create's `userdata` asks the claimed server to boot.
enum Request {
    /// A pool's Harvester join.
    Install(InstallRequest),
    /// A Gardener machine's OS image and user data.
    Image(ImageRequest),
}

/// The provider id's scheme: `inventory://<namespace>/<name>`.
pub const PROVIDER_SCHEME: &str = "inventory://";

/// What one `InventoryCloud` takes its servers from.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The namespaces whose Inventories may be taken; empty: every namespace.
    pub namespaces: Vec<String>,
    /// Which Inventories (their labels).
    pub selector: LabelSelector,
    /// Where the servers' addresses come from.
    pub address_pool: PoolRef,
    /// How long one delete waits for the power off to be read back before it answers
    /// "not yet" (a transient error; the next delete goes on waiting, sending nothing).
    pub off_wait: Duration,
    /// How often that wait reads the Job and the Machine.
    pub poll: Duration,
    /// The one owner tag this cloud acts for (a pool's): creates under another tag are
    /// refused, and a server claimed by another owner is, to it, not there. `None`: any
    /// owner (a tool's view).
    pub owner: Option<String>,
    /// Where servers reach ingot's boot server (`--boot-url`): the install config and the
    /// installer's webhook of a create with an [`InstallRequest`] are under it.
    pub boot_url: Option<url::Url>,
    /// How an install boots where the Inventory does not say ([`BOOT_MEDIA_ANNOTATION`]): the
    /// pool's `bootMedia`. A machine's image always boots by network.
    pub boot_media: BootMedia,
    /// The least a server taken must have (a pool's `inventoryMinimum`); empty: any.
    pub minimum: Minimum,
    /// What a delete erases before the power off (a pool's `wipePolicy`).
    pub wipe: WipePolicy,
    /// The site's wipe image (`--wipe-kernel-url`, `--wipe-initrd-url`), needed by
    /// [`WipePolicy::Metadata`].
    pub wipe_image: Option<WipeImage>,
    /// Test hook: the process aborts at these named points (`onprem-after-claim`,
    /// `onprem-after-boot-job`, `onprem-after-wipe-job`, `onprem-after-off-confirmed`), to
    /// prove a crash there harmless.
    pub crash_point: Option<String>,
}

/// A [`BareMetalCloud`] over Inventories (see the module's documentation).
pub struct InventoryCloud {
    client: Client,
    settings: Settings,
}

impl InventoryCloud {
    /// Refuses a selector the API server would refuse, naming it.
    pub fn new(client: Client, settings: Settings) -> Result<Self> {
        if let Err(e) = Selector::try_from(settings.selector.clone()) {
            return Err(Error::InvalidRequest(format!(
                "the Inventory selector {:?} is not a valid label selector ({e}); use matchLabels or matchExpressions with In, NotIn, Exists, DoesNotExist",
                settings.selector
            )));
        }
        Ok(Self { client, settings })
    }

    fn crash_point(&self, point: &str) {
        crate::crash_point(self.settings.crash_point.as_deref(), point);
    }

    fn inventories(&self, namespace: &str) -> Api<Inventory> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Refuses an owner tag other than the one this cloud acts for.
    fn acts_for(&self, owner: &str) -> Result<()> {
        match &self.settings.owner {
            Some(ours) if ours != owner => Err(Error::InvalidRequest(format!(
                "this Inventory cloud acts for owner {ours:?} only, not {owner:?}"
            ))),
            _ => Ok(()),
        }
    }

    /// The Inventory's claim, if it is one this cloud acts for.
    fn our_claim(&self, inventory: &Inventory) -> Option<Claim> {
        claims::claim_of(inventory).filter(|c| self.acts_for(&c.owner).is_ok())
    }

    fn allowed(&self, namespace: &str) -> bool {
        self.settings.namespaces.is_empty()
            || self.settings.namespaces.iter().any(|n| n == namespace)
    }

    /// Every Inventory and Cluster of the allowed namespaces.
    async fn list(&self) -> Result<(Vec<Arc<Inventory>>, Vec<Arc<Cluster>>)> {
        let lp = ListParams::default();
        let mut inventories = Vec::new();
        let mut clusters = Vec::new();
        if self.settings.namespaces.is_empty() {
            inventories.extend(
                Api::<Inventory>::all(self.client.clone())
                    .list(&lp)
                    .await
                    .map_err(kube_error)?
                    .items,
            );
            clusters.extend(
                Api::<Cluster>::all(self.client.clone())
                    .list(&lp)
                    .await
                    .map_err(kube_error)?
                    .items,
            );
        } else {
            for ns in &self.settings.namespaces {
                inventories.extend(
                    self.inventories(ns)
                        .list(&lp)
                        .await
                        .map_err(kube_error)?
                        .items,
                );
                clusters.extend(
                    Api::<Cluster>::namespaced(self.client.clone(), ns)
                        .list(&lp)
                        .await
                        .map_err(kube_error)?
                        .items,
                );
            }
        }
        Ok((
            inventories.into_iter().map(Arc::new).collect(),
            clusters.into_iter().map(Arc::new).collect(),
        ))
    }

    /// The Inventory of a server id (`<namespace>/<name>`), `None` when it does not exist.
    async fn read(&self, id: &str) -> Result<Option<Inventory>> {
        let (namespace, name) = parse_id(id)?;
        if !self.allowed(namespace) {
            return Err(Error::InvalidRequest(format!(
                "server {id}: namespace {namespace} is not one this cloud takes Inventories from ({})",
                self.settings.namespaces.join(", ")
            )));
        }
        self.inventories(namespace)
            .get_opt(name)
            .await
            .map_err(kube_error)
    }

    /// The claimed Inventory of a server id and its claim, not being released.
    async fn claimed(&self, id: &str) -> Result<(Inventory, Claim)> {
        let inventory = self.read(id).await?.ok_or_else(|| Error::NotFound {
            message: format!("no Inventory {id}"),
        })?;
        // Another owner's server is not one of ours: nothing is said of it.
        let claim = self.our_claim(&inventory).ok_or_else(|| Error::NotFound {
            message: format!("Inventory {id} is not claimed by this owner"),
        })?;
        not_releasing(&inventory)?;
        Ok((inventory, claim))
    }

    /// Why nothing could be claimed, for the caller's condition.
    fn shortage(&self, inventories: &[Arc<Inventory>], clusters: &[Arc<Cluster>]) -> Error {
        let selector = Selector::try_from(self.settings.selector.clone()).unwrap_or_default();
        let matching: Vec<&Arc<Inventory>> = inventories
            .iter()
            .filter(|i| selector.matches(i.labels()))
            .collect();
        let where_ = if self.settings.namespaces.is_empty() {
            "any namespace".to_owned()
        } else {
            format!("namespaces {}", self.settings.namespaces.join(", "))
        };
        let shown = selector.to_string();
        if matching.is_empty() {
            return Error::NoServer {
                why: Shortage::NoneMatching,
                message: format!(
                    "no Inventory in {where_} matches the selector {shown:?}; label Inventories to match it, or change the selector"
                ),
            };
        }
        if let Some(too_small) = too_small(&self.settings.minimum, &matching, clusters, &shown) {
            return too_small;
        }
        let not_ready: Vec<String> = matching
            .iter()
            .filter(|i| claims::why_taken(i, clusters) == Some(claims::Taken::NotReady))
            .map(|i| key(i))
            .collect();
        if !not_ready.is_empty() {
            return Error::NoServer {
                why: Shortage::NotReady,
                message: format!(
                    "of the {} Inventories matching {shown:?}, none is free and ready; not ready (their BMC not reached): {}",
                    matching.len(),
                    not_ready.join(", ")
                ),
            };
        }
        Error::NoServer {
            why: Shortage::NoneFree,
            message: format!(
                "all {} Inventories matching {shown:?} are taken (claimed, in a provisioned Cluster, or being deleted); add Inventories or free one",
                matching.len()
            ),
        }
    }

    /// Claims a free Inventory for `claim`, or finds the one it holds.
    async fn claim(&self, claim: &Claim) -> Result<Inventory> {
        // A claimer that lost every race on one list reads again: each 409 is a change (often
        // a status write) since the list.
        for _ in 0..3 {
            let (inventories, clusters) = self.list().await?;
            if let Some(held) = claims::find(&inventories, &claim.owner, &claim.hostname) {
                return Ok((**held).clone());
            }
            let mut candidates = claims::candidates(
                &inventories,
                &clusters,
                &self.settings.selector,
                &claim.hostname,
            );
            candidates.retain(|i| size::fits(i, &self.settings.minimum) == Fit::Yes);
            if candidates.is_empty() {
                return Err(self.shortage(&inventories, &clusters));
            }
            for candidate in candidates.iter().take(claims::MAX_ATTEMPTS) {
                let api = self.inventories(&candidate.namespace().unwrap_or_default());
                match claims::claim(&api, std::slice::from_ref(candidate), claim)
                    .await
                    .map_err(kube_error)?
                {
                    Claimed::Took(inventory) => return Ok(*inventory),
                    Claimed::NoneLeft { .. } => continue,
                }
            }
        }
        Err(Error::Transient {
            message: format!(
                "every Inventory tried for {}/{} changed before it could be claimed; try again",
                claim.owner, claim.hostname
            ),
            source: None,
        })
    }

    /// Writes (or removes, `None`) annotations of a claimed Inventory under the
    /// `resourceVersion` read, reading again on a conflict; refused when the claim is no longer
    /// `claim`'s.
    async fn record(
        &self,
        inventory: &Inventory,
        claim: &Claim,
        values: &[(&str, Option<String>)],
    ) -> Result<Inventory> {
        let api = self.inventories(&inventory.namespace().unwrap_or_default());
        let mut current = inventory.clone();
        for _ in 0..10 {
            if claims::claim_of(&current).as_ref() != Some(claim) {
                return Err(Error::Conflict {
                    message: format!(
                        "Inventory {} is no longer claimed by {} for {}",
                        key(&current),
                        claim.owner,
                        claim.hostname
                    ),
                });
            }
            let annotations: BTreeMap<&str, &Option<String>> =
                values.iter().map(|(k, v)| (*k, v)).collect();
            let patch = json!({"metadata": {
                "resourceVersion": current.resource_version(),
                "annotations": annotations,
            }});
            match api
                .patch(
                    &current.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(written) => return Ok(written),
                Err(e) if crate::runtime::is_conflict(&e) => {
                    current = api.get(&current.name_any()).await.map_err(kube_error)?;
                }
                Err(e) => return Err(kube_error(e)),
            }
        }
        Err(Error::Transient {
            message: format!(
                "Inventory {} kept changing under ten writes",
                key(inventory)
            ),
            source: None,
        })
    }

    /// The claim's address: taken (or found: the pool gives an owner the address it holds),
    /// then recorded.
    async fn ensure_address(
        &self,
        inventory: Inventory,
        claim: &Claim,
        spec: &CreateServer,
    ) -> Result<Inventory> {
        let recorded = annotation(&inventory, ADDRESS_ANNOTATION).is_some();
        let url = match &spec.boot {
            ingot_metal::Boot::Ipxe { script_url, .. } => script_url.clone(),
            ingot_metal::Boot::Os(_) => None,
        };
        let tags: Vec<&String> = spec.tags.iter().filter(|t| **t != claim.owner).collect();
        let tags = (!tags.is_empty()).then(|| serde_json::to_string(&tags).unwrap_or_default());
        if recorded
            && annotation(&inventory, IPXE_URL_ANNOTATION) == url.as_deref()
            && annotation(&inventory, TAGS_ANNOTATION) == tags.as_deref()
        {
            return Ok(inventory);
        }
        let pool = &self.settings.address_pool;
        let address = match annotation(&inventory, ADDRESS_ANNOTATION) {
            Some(a) => a.to_owned(),
            None => {
                let owner = inventory_owner(
                    &inventory.namespace().unwrap_or_default(),
                    &inventory.name_any(),
                );
                allocate_address(&self.client, pool, &owner, None)
                    .await
                    .map_err(|e| {
                        if e.is_exhausted() {
                            Error::NoCapacity {
                                message: e.to_string(),
                            }
                        } else if e.is_retryable() {
                            Error::Transient {
                                message: e.to_string(),
                                source: None,
                            }
                        } else {
                            Error::Validation {
                                message: e.to_string(),
                            }
                        }
                    })?
                    .to_string()
            }
        };
        self.record(
            &inventory,
            claim,
            &[
                (ADDRESS_ANNOTATION, Some(address)),
                (
                    ADDRESS_POOL_ANNOTATION,
                    Some(format!("{}/{}", pool.namespace, pool.name)),
                ),
                (IPXE_URL_ANNOTATION, url),
                (TAGS_ANNOTATION, tags),
            ],
        )
        .await
    }

    /// How the claim's server boots anything ingot serves it (its install or a machine's image,
    /// its wipe): the Inventory's annotation where set, else the cloud's choice (a pool's
    /// `spec.bootMedia`; the network for machines). An annotation ingot cannot follow is
    /// refused, naming it.
    fn boot_media(&self, inventory: &Inventory) -> Result<BootMedia> {
        match annotation(inventory, BOOT_MEDIA_ANNOTATION) {
            None => Ok(self.settings.boot_media),
            Some(value) => BootMedia::parse(Some(value)).map_err(|why| Error::Validation {
                message: format!("Inventory {}: {why}", key(inventory)),
            }),
        }
    }

    /// Sends install boot number `n` (once), then records it.
    async fn boot(
        &self,
        inventory: Inventory,
        claim: &Claim,
        n: u32,
        media: BootMedia,
    ) -> Result<Inventory> {
        let name = job_name(&inventory, claim, &format!("boot-{n}"));
        let tasks = self.boot_tasks(&inventory, media)?;
        self.send(&inventory, claim, &name, tasks).await?;
        self.crash_point("onprem-after-boot-job");
        self.record(
            &inventory,
            claim,
            &[
                (BOOTS_ANNOTATION, Some(n.to_string())),
                (BOOT_JOB_ANNOTATION, Some(name)),
                (
                    BOOTED_FROM_ANNOTATION,
                    (media == BootMedia::Cd).then(|| "cd".to_owned()),
                ),
            ],
        )
        .await
    }

    /// A one-time boot from `media`: power off, the boot device set once, power on.
    fn boot_tasks(&self, inventory: &Inventory, media: BootMedia) -> Result<serde_json::Value> {
        Ok(match media {
            BootMedia::Pxe => json!([
                {"powerAction": "off"},
                {"oneTimeBootDeviceAction": {"device": ["pxe"]}},
                {"powerAction": "on"},
            ]),
            // Inserted before the server is touched: a BMC without virtual media fails the
            // Job there, with the server as it was.
            BootMedia::Cd => json!([
                {"virtualMediaAction": {"kind": "CD", "mediaURL": self.media_url(inventory)?}},
                {"powerAction": "off"},
                {"oneTimeBootDeviceAction": {"device": ["cdrom"]}},
                {"powerAction": "on"},
            ]),
        })
    }

    /// A CD boot that failed because the BMC has no virtual media is not a failed server to
    /// replace: its first task failed before the server was touched, and every other
    /// Inventory may be the same. It is refused instead, saying what to change; the claim
    /// stays, and nothing is sent.
    async fn refuse_cd_without_virtual_media(&self, inventory: &Inventory) -> Result<()> {
        match self.cd_boot_refused(inventory).await? {
            Some(why) => Err(Error::Validation {
                message: format!(
                    "the BMC of Inventory {} cannot insert a CD as virtual media ({why}); the server was not touched: boot it by network (the pool's spec.bootMedia: pxe, or the Inventory's {BOOT_MEDIA_ANNOTATION}: pxe), then delete this server's Instance",
                    key(inventory)
                ),
            }),
            None => Ok(()),
        }
    }

    /// The BMC's reason when the claim's boot from the CD failed because the BMC has no
    /// virtual media; `None` for any other boot.
    async fn cd_boot_refused(&self, inventory: &Inventory) -> Result<Option<String>> {
        let Some(job) = annotation(inventory, BOOT_JOB_ANNOTATION) else {
            return Ok(None);
        };
        if annotation(inventory, BOOTED_FROM_ANNOTATION) != Some("cd") {
            return Ok(None);
        }
        let namespace = inventory.namespace().unwrap_or_default();
        Ok(
            match power::job_outcome(self.job(&namespace, job).await?.as_ref()) {
                JobOutcome::Failed(why) if no_virtual_media(&why) => Some(why),
                _ => None,
            },
        )
    }

    /// Where the BMC fetches the server's boot CD.
    fn media_url(&self, inventory: &Inventory) -> Result<String> {
        crate::provisioning::media::media_url(
            self.settings.boot_url.as_ref(),
            &inventory.namespace().unwrap_or_default(),
            &inventory.name_any(),
        )
        .ok_or_else(|| {
            Error::InvalidRequest(
                "a boot CD is served by ingot's boot server: give ingot run --boot-url (and --boot-media-dir)".to_owned(),
            )
        })?
        .map_err(Error::InvalidRequest)
    }

    /// Creates the Job of this name once (one already there is the same action, not sent
    /// again).
    async fn send(
        &self,
        inventory: &Inventory,
        claim: &Claim,
        name: &str,
        tasks: serde_json::Value,
    ) -> Result<()> {
        let mut job = power::inventory_job(
            inventory,
            name,
            (JOB_INVENTORY_LABEL, inventory.name_any()),
            tasks,
        )
        .map_err(|e| Error::InvalidRequest(format!("bmc job {name}: {e}")))?;
        job.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(CLAIM_JOB_LABEL.to_owned(), claim_hash(inventory, claim));
        power::create_once(&self.client, &job)
            .await
            .map_err(kube_error)
    }

    async fn job(&self, namespace: &str, name: &str) -> Result<Option<Job>> {
        Api::<Job>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(kube_error)
    }

    /// The power state the Inventory's Machine last read from its BMC.
    async fn machine_power(&self, inventory: &Inventory) -> Result<Option<String>> {
        let machine = Api::<Machine>::namespaced(
            self.client.clone(),
            &inventory.namespace().unwrap_or_default(),
        )
        .get_opt(&inventory.name_any())
        .await
        .map_err(kube_error)?;
        Ok(machine.and_then(|m| m.status).and_then(|s| s.power_state))
    }

    /// The server as reported: its state from the last boot Job and the Machine's power.
    async fn server(&self, inventory: &Inventory) -> Result<Server> {
        let namespace = inventory.namespace().unwrap_or_default();
        let name = inventory.name_any();
        let claim = claims::claim_of(inventory);
        let off_confirmed = annotation(inventory, OFF_CONFIRMED_ANNOTATION).is_some();
        let boot = match annotation(inventory, BOOT_JOB_ANNOTATION) {
            Some(job) if !off_confirmed => Some(power::job_outcome(
                self.job(&namespace, job).await?.as_ref(),
            )),
            _ => None,
        };
        let machine = if matches!(boot, Some(JobOutcome::Completed | JobOutcome::Missing)) {
            self.machine_power(inventory).await?
        } else {
            None
        };
        let state = state_of(off_confirmed, boot.as_ref(), machine.as_deref());
        let ports = inventory
            .spec
            .management_interface_mac_address
            .iter()
            .map(|mac| Port {
                id: format!("{namespace}/{name}/0"),
                name: "eth0".to_owned(),
                kind: PortKind::Physical,
                mac: Some(crate::provisioning::boot::normal_mac(mac)),
                bonded: false,
                mode: None,
                vlans: Vec::new(),
            })
            .collect();
        let addresses = annotation(inventory, ADDRESS_ANNOTATION)
            .map(|a| Address {
                address: a.to_owned(),
                family: 4,
                public: false,
                management: true,
            })
            .into_iter()
            .collect();
        Ok(Server {
            id: format!("{namespace}/{name}"),
            provider_id: format!("{PROVIDER_SCHEME}{namespace}/{name}"),
            hostname: claim
                .as_ref()
                .map(|c| c.hostname.clone())
                .unwrap_or_default(),
            state,
            plan: String::new(),
            location: namespace,
            tags: claim
                .map(|c| {
                    let recorded: Vec<String> = annotation(inventory, TAGS_ANNOTATION)
                        .and_then(|t| serde_json::from_str(t).ok())
                        .unwrap_or_default();
                    std::iter::once(c.owner).chain(recorded).collect()
                })
                .unwrap_or_default(),
            ports,
            addresses,
            ipxe_script_url: annotation(inventory, IPXE_URL_ANNOTATION).map(str::to_owned),
            always_pxe: false,
            network_mode: None,
        })
    }

    async fn create(&self, spec: &CreateServer) -> Result<Server> {
        self.acts_for(&spec.owner_tag)?;
        // Refused before anything is taken: such a server could never be released.
        self.wipe_image()?;
        let claim = Claim {
            owner: spec.owner_tag.clone(),
            hostname: spec.hostname.clone(),
        };
        let inventory = self.claim(&claim).await?;
        self.crash_point("onprem-after-claim");
        if releasing(&inventory) {
            return Err(Error::Conflict {
                message: format!(
                    "Inventory {} held for {} is being released; create it again once it is",
                    key(&inventory),
                    claim.hostname
                ),
            });
        }
        let inventory = self.ensure_address(inventory, &claim, spec).await?;
        if let Some(userdata) = &spec.userdata {
            let request = match ImageRequest::parse(userdata) {
                Some(image) => Request::Image(image),
                None => Request::Install(
                    InstallRequest::parse(userdata).map_err(Error::InvalidRequest)?,
                ),
            };
            self.ensure_install(&inventory, &claim, &request).await?;
        }
        let inventory = if boots(&inventory) == 0 {
            let media = self.boot_media(&inventory)?;
            self.boot(inventory, &claim, 1, media).await?
        } else {
            inventory
        };
        self.server(&inventory).await
    }

    /// Writes the claim's files (a pool's install: script, config, address; a machine's image:
    /// script, address, NoCloud data), rendered for `request`, into its install Secret, where
    /// the boot server hands them out; unchanged files write nothing.
    async fn ensure_install(
        &self,
        inventory: &Inventory,
        claim: &Claim,
        request: &Request,
    ) -> Result<()> {
        let boot_url = self.settings.boot_url.as_ref().ok_or_else(|| {
            Error::InvalidRequest(
                "ingot runs without --boot-url, so a server on premises cannot reach its install config: give ingot run the URL servers reach its boot server at".to_owned(),
            )
        })?;
        let namespace = inventory.namespace().unwrap_or_default();
        let address = annotation(inventory, ADDRESS_ANNOTATION).unwrap_or_default();
        let pool_ref = &self.settings.address_pool;
        let pool = Api::<AddressPool>::namespaced(self.client.clone(), &pool_ref.namespace)
            .get_opt(&pool_ref.name)
            .await
            .map_err(kube_error)?
            .ok_or_else(|| Error::Validation {
                message: format!("{pool_ref} does not exist; create it or name another"),
            })?;
        let invalid = |message: String| Error::Validation {
            message: format!("the install of Inventory {}: {message}", key(inventory)),
        };
        let wanted = match request {
            Request::Install(request) => {
                let files = install::render(
                    request,
                    inventory,
                    &claim.hostname,
                    address,
                    &pool,
                    boot_url,
                )
                .map_err(invalid)?;
                install::install_secret(inventory, &files)
            }
            Request::Image(request) => {
                let (files, meta_data, user_data) = image::render(
                    request,
                    inventory,
                    &claim.hostname,
                    address,
                    &pool,
                    boot_url,
                )
                .map_err(invalid)?;
                image::image_secret(inventory, &files, &meta_data, &user_data)
            }
        };
        self.write_secret(&namespace, &wanted).await
    }

    /// Creates the claim's install Secret, or merges `wanted`'s keys into it (all its keys are
    /// ours); unchanged keys write nothing.
    async fn write_secret(&self, namespace: &str, wanted: &Secret) -> Result<()> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let name = wanted.name_any();
        match secrets.get_opt(&name).await.map_err(kube_error)? {
            None => match secrets.create(&PostParams::default(), wanted).await {
                Ok(_) => Ok(()),
                // Another create wrote it: the next create compares.
                Err(e) if crate::runtime::is_conflict(&e) => Ok(()),
                Err(e) => Err(kube_error(e)),
            },
            Some(current)
                if wanted
                    .data
                    .iter()
                    .flatten()
                    .all(|(k, v)| current.data.as_ref().and_then(|d| d.get(k)) == Some(v)) =>
            {
                Ok(())
            }
            // Its keys are all ours: a merge patch of them, under the resourceVersion read.
            Some(current) => {
                let patch = json!({
                    "metadata": {"resourceVersion": current.resource_version()},
                    "data": wanted.data,
                });
                secrets
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(drop)
                    .map_err(kube_error)
            }
        }
    }

    /// The wipe image, where the wipe policy needs one.
    fn wipe_image(&self) -> Result<Option<&WipeImage>> {
        match (self.settings.wipe, &self.settings.wipe_image) {
            (WipePolicy::None, _) => Ok(None),
            (WipePolicy::Metadata, Some(image)) if self.settings.boot_url.is_some() => {
                Ok(Some(image))
            }
            (WipePolicy::Metadata, _) => Err(Error::Validation {
                message: "wipePolicy metadata boots released servers into the site's wipe image, and ingot was given none: run ingot with --wipe-kernel-url, --wipe-initrd-url and --boot-url, or set wipePolicy: none".to_owned(),
            }),
        }
    }

    /// A release's wipe ([`wipe`]): the wipe boot sent once and recorded, then (up to
    /// `off_wait`) its report awaited. Answers the Inventory once wiped; until then "not yet",
    /// with the claim, its address and its files kept: a server is never freed unwiped.
    async fn wipe(&self, inventory: Inventory, claim: &Claim) -> Result<Inventory> {
        let Some(image) = self.wipe_image()? else {
            return Ok(inventory);
        };
        if wipe::wiped(&inventory) {
            return Ok(inventory);
        }
        let namespace = inventory.namespace().unwrap_or_default();
        let inventory = match annotation(&inventory, WIPE_JOB_ANNOTATION) {
            None => self.send_wipe(inventory, claim, image).await?,
            // Recorded, then deleted: a person asked for the failed wipe boot again (its Job is
            // created before it is recorded, and only a release deletes it). Sent once more.
            Some(job) if self.job(&namespace, job).await?.is_none() => {
                self.send_wipe(inventory, claim, image).await?
            }
            Some(_) => inventory,
        };
        let name = inventory.name_any();
        let job = annotation(&inventory, WIPE_JOB_ANNOTATION)
            .unwrap_or_default()
            .to_owned();
        let deadline = Instant::now() + self.settings.off_wait;
        loop {
            let current = self
                .inventories(&namespace)
                .get(&name)
                .await
                .map_err(kube_error)?;
            if wipe::wiped(&current) {
                return Ok(current);
            }
            if let JobOutcome::Failed(why) =
                power::job_outcome(self.job(&namespace, &job).await?.as_ref())
            {
                return Err(Error::Validation {
                    message: format!(
                        "the wipe boot of Inventory {} (bmc job {namespace}/{job}) failed: {why}; it is not freed unwiped: its claim and address are kept: check its BMC, then delete that Job to send the wipe boot again",
                        key(&current)
                    ),
                });
            }
            if Instant::now() >= deadline {
                return Err(Error::Transient {
                    message: format!(
                        "Inventory {} is being wiped (bmc job {namespace}/{job}); its claim and address are kept until its wipe image reports",
                        key(&current)
                    ),
                    source: None,
                });
            }
            tokio::time::sleep(self.settings.poll).await;
        }
    }

    /// Writes the wipe's script into the claim's install Secret, sends the wipe boot (a Job
    /// named after the claim, created once) and records it.
    async fn send_wipe(
        &self,
        inventory: Inventory,
        claim: &Claim,
        image: &WipeImage,
    ) -> Result<Inventory> {
        let namespace = inventory.namespace().unwrap_or_default();
        let invalid = |message: String| Error::Validation {
            message: format!("the wipe of Inventory {}: {message}", key(&inventory)),
        };
        let address = annotation(&inventory, ADDRESS_ANNOTATION)
            .ok_or_else(|| invalid("it has no address recorded".to_owned()))?
            .to_owned();
        let pool_ref = annotation(&inventory, ADDRESS_POOL_ANNOTATION)
            .and_then(|p| p.split_once('/'))
            .map(|(namespace, name)| PoolRef {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
            .unwrap_or_else(|| self.settings.address_pool.clone());
        let pool = Api::<AddressPool>::namespaced(self.client.clone(), &pool_ref.namespace)
            .get_opt(&pool_ref.name)
            .await
            .map_err(kube_error)?
            .ok_or_else(|| invalid(format!("{pool_ref}, its address's pool, does not exist")))?;
        let link =
            ipam::Pool::parse(&pool.spec).map_err(|e| invalid(format!("{pool_ref}: {e}")))?;
        let (netmask, gateway) = (link.netmask().to_string(), link.gateway().to_string());
        let boot_url = self.settings.boot_url.as_ref().ok_or_else(|| {
            invalid("ingot runs without --boot-url, which the wipe reports to".to_owned())
        })?;
        let report = boot_url
            .join(&format!("wiped/{namespace}/{}", inventory.name_any()))
            .map_err(|e| invalid(format!("the boot URL {boot_url}: {e}")))?;
        let mac = inventory
            .spec
            .management_interface_mac_address
            .clone()
            .unwrap_or_default();
        let at = WipeAddress {
            mac: &mac,
            address: &address,
            netmask: &netmask,
            gateway: &gateway,
        };
        let script = wipe::script(image, self.settings.wipe, &at, &report).map_err(invalid)?;
        let secret = install::claim_secret(
            &inventory,
            &[
                (WIPE_SCRIPT_KEY, &script),
                (ADDRESS_KEY, &address),
                (install::NETMASK_KEY, &netmask),
                (install::GATEWAY_KEY, &gateway),
            ],
        );
        self.write_secret(&namespace, &secret).await?;
        let media = self.boot_media(&inventory)?;
        let name = job_name(&inventory, claim, "wipe");
        let tasks = self.boot_tasks(&inventory, media)?;
        self.send(&inventory, claim, &name, tasks).await?;
        self.crash_point("onprem-after-wipe-job");
        self.record(&inventory, claim, &[(WIPE_JOB_ANNOTATION, Some(name))])
            .await
    }

    /// Waits (up to `off_wait`) for the release's power off to be read back.
    async fn confirm_off(&self, inventory: &Inventory, job: &str) -> Result<()> {
        let namespace = inventory.namespace().unwrap_or_default();
        let deadline = Instant::now() + self.settings.off_wait;
        loop {
            match power::job_outcome(self.job(&namespace, job).await?.as_ref()) {
                JobOutcome::Completed
                    if self.machine_power(inventory).await?.as_deref() == Some("off") =>
                {
                    return Ok(());
                }
                JobOutcome::Failed(why) => {
                    return Err(Error::Validation {
                        message: format!(
                            "power off of Inventory {} (bmc job {namespace}/{job}) failed: {why}; its claim and address are kept: check its BMC, then delete that Job to send the power off again",
                            key(inventory)
                        ),
                    });
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(Error::Transient {
                    message: format!(
                        "Inventory {} is not confirmed off yet (bmc job {namespace}/{job}); its claim and address are kept until it is",
                        key(inventory)
                    ),
                    source: None,
                });
            }
            tokio::time::sleep(self.settings.poll).await;
        }
    }
}

#[async_trait]
impl BareMetalCloud for InventoryCloud {
    fn name(&self) -> &'static str {
        "inventory"
    }

    async fn create_server(&self, spec: &CreateServer) -> Result<Server> {
        self.create(spec).await
    }

    /// As `create_server`: the claim is found by owner and hostname before anything is taken,
    /// which is what makes a repeated create safe here.
    async fn create_missing_server(&self, spec: &CreateServer) -> Result<Server> {
        self.create(spec).await
    }

    async fn get_server(&self, id: &str) -> Result<Server> {
        match self.read(id).await? {
            Some(inventory) if self.our_claim(&inventory).is_some() => {
                let server = self.server(&inventory).await?;
                if server.state == ServerState::Failed {
                    self.refuse_cd_without_virtual_media(&inventory).await?;
                }
                Ok(server)
            }
            _ => Err(Error::NotFound {
                message: format!("no claimed Inventory {id}"),
            }),
        }
    }

    async fn find_server(&self, owner_tag: &str, hostname: &str) -> Result<Option<Server>> {
        self.acts_for(owner_tag)?;
        let (inventories, _) = self.list().await?;
        match claims::find(&inventories, owner_tag, hostname) {
            Some(i) if !releasing(i) => Ok(Some(self.server(i).await?)),
            _ => Ok(None),
        }
    }

    async fn list_servers(&self, owner_tag: &str) -> Result<Vec<Server>> {
        self.acts_for(owner_tag)?;
        let (inventories, _) = self.list().await?;
        let mut servers = Vec::new();
        for inventory in claims::held_by(&inventories, owner_tag) {
            servers.push(self.server(inventory).await?);
        }
        Ok(servers)
    }

    async fn update_boot(&self, _id: &str, _update: &BootUpdate) -> Result<Server> {
        Err(not_on_premises(
            "changing a server's iPXE URL or userdata (update_boot)",
        ))
    }

    /// One more install boot (PXE once, power cycle); each call sends one.
    async fn reinstall(&self, id: &str, reinstall: &Reinstall) -> Result<()> {
        let (inventory, claim) = self.claimed(id).await?;
        let inventory = match &reinstall.ipxe_script_url {
            Some(url) => {
                self.record(
                    &inventory,
                    &claim,
                    &[(IPXE_URL_ANNOTATION, Some(url.clone()))],
                )
                .await?
            }
            None => inventory,
        };
        let n = boots(&inventory) + 1;
        let media = self.boot_media(&inventory)?;
        self.boot(inventory, &claim, n, media).await.map(drop)
    }

    async fn power(&self, id: &str, action: PowerAction) -> Result<()> {
        let (inventory, claim) = self.claimed(id).await?;
        let (word, tasks) = match action {
            PowerAction::On => ("on", json!([{"powerAction": "on"}])),
            PowerAction::Off => ("off", json!([{"powerAction": "off"}])),
            PowerAction::Reboot => (
                "reboot",
                json!([{"powerAction": "off"}, {"powerAction": "on"}]),
            ),
        };
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let name = job_name(
            &inventory,
            &claim,
            &format!("power-{word}-{}", &unique[..8]),
        );
        self.send(&inventory, &claim, &name, tasks).await
    }

    async fn delete_server(&self, id: &str) -> Result<()> {
        let Some(inventory) = self.read(id).await? else {
            return Ok(());
        };
        // Unclaimed, or another owner's: nothing of ours to power off or release (an id
        // written by hand into an Instance's status must not reach another pool's server).
        let Some(claim) = self.our_claim(&inventory) else {
            return Ok(());
        };
        let namespace = inventory.namespace().unwrap_or_default();
        let inventory = if annotation(&inventory, OFF_CONFIRMED_ANNOTATION).is_none() {
            let inventory = self.wipe(inventory, &claim).await?;
            // A claim booted from the CD may have it inserted still (a machine's live image runs
            // from it; a wipe booted from it): out with the power off. An empty slot is not
            // ejected again (the BMC client reads the slot first); a BMC that took no CD is
            // not asked.
            let cd_in = annotation(&inventory, BOOTED_FROM_ANNOTATION) == Some("cd")
                && self.cd_boot_refused(&inventory).await?.is_none();
            let tasks = if cd_in {
                json!([{"powerAction": "off"}, {"virtualMediaAction": {"kind": "CD", "mediaURL": ""}}])
            } else {
                json!([{"powerAction": "off"}])
            };
            let job = job_name(&inventory, &claim, "release-off");
            self.send(&inventory, &claim, &job, tasks).await?;
            self.confirm_off(&inventory, &job).await?;
            self.record(
                &inventory,
                &claim,
                &[(OFF_CONFIRMED_ANNOTATION, Some("true".to_owned()))],
            )
            .await?
        } else {
            inventory
        };
        self.crash_point("onprem-after-off-confirmed");
        if let Some((pool_ns, pool_name)) =
            annotation(&inventory, ADDRESS_POOL_ANNOTATION).and_then(|p| p.split_once('/'))
        {
            let pool = PoolRef {
                namespace: pool_ns.to_owned(),
                name: pool_name.to_owned(),
            };
            release_address(
                &self.client,
                &pool,
                &inventory_owner(&namespace, &inventory.name_any()),
            )
            .await
            .map_err(|e| Error::Transient {
                message: e.to_string(),
                source: None,
            })?;
        }
        // The install files (the join token, the OS password) go with the claim.
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
        match secrets
            .delete(
                &install::install_secret_name(&inventory.name_any()),
                &DeleteParams::default(),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(kube_error(e)),
        }
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &namespace);
        let selector = format!("{CLAIM_JOB_LABEL}={}", claim_hash(&inventory, &claim));
        // One by one (the verbs the provisioning and Rufio roles grant: list, delete).
        for job in jobs
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(kube_error)?
        {
            match jobs
                .delete(&job.name_any(), &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(kube_error(e)),
            }
        }
        let mut annotations: Vec<&str> = RECORDS.to_vec();
        annotations.push(OFF_CONFIRMED_ANNOTATION);
        let api = self.inventories(&namespace);
        let mut current = inventory;
        for _ in 0..10 {
            match claims::release_with(&api, &current, &claim, &annotations).await {
                Ok(_) => return Ok(()),
                Err(e) if crate::runtime::is_conflict(&e) => {
                    current = api.get(&current.name_any()).await.map_err(kube_error)?;
                }
                Err(e) => return Err(kube_error(e)),
            }
        }
        Err(Error::Transient {
            message: format!("Inventory {id} kept changing under ten releases"),
            source: None,
        })
    }

    async fn set_network_mode(&self, _id: &str, _mode: NetworkMode) -> Result<Server> {
        Err(not_on_premises(
            "network modes (bonds and VLAN ids on interfaces come from the install config)",
        ))
    }

    async fn assign_vlans(&self, _port_id: &str, _vlans: &[String]) -> Result<Port> {
        Err(not_on_premises(
            "VLAN assignment to ports (VLAN ids on interfaces come from the install config)",
        ))
    }

    async fn unassign_vlans(&self, _port_id: &str, _vlans: &[String]) -> Result<Port> {
        Err(not_on_premises(
            "VLAN assignment to ports (VLAN ids on interfaces come from the install config)",
        ))
    }

    async fn list_vlans(&self, _location: &str) -> Result<Vec<Vlan>> {
        Err(not_on_premises("the cloud's VLANs"))
    }

    async fn ensure_vlan(&self, _location: &str, _vxlan: u32, _description: &str) -> Result<Vlan> {
        Err(not_on_premises("the cloud's VLANs"))
    }

    async fn plans(&self) -> Result<Vec<PlanInfo>> {
        Err(not_on_premises(
            "plans (servers are chosen by the Inventory selector)",
        ))
    }

    async fn locations(&self) -> Result<Vec<Location>> {
        Err(not_on_premises(
            "locations (servers are chosen by the Inventory selector)",
        ))
    }

    async fn capacity(&self, _plan: &str, _location: &str) -> Result<CapacityLevel> {
        Err(not_on_premises(
            "capacity (servers are chosen by the Inventory selector)",
        ))
    }
}

/// Why no Inventory matching the selector was taken, when it is their size: every one not
/// held elsewhere (ready or not) below the minimum (`NoneMatching`), or the free ones' sizes
/// not read yet (`NotReady`), each named.
fn too_small(
    minimum: &Minimum,
    matching: &[&Arc<Inventory>],
    clusters: &[Arc<Cluster>],
    shown: &str,
) -> Option<Error> {
    if minimum.is_empty() {
        return None;
    }
    // Not claimed nor allocated: what the minimum alone may rule out (a size once read
    // stays, so an Inventory whose BMC is not reached right now is judged too).
    let takeable: Vec<(String, Fit, bool)> = matching
        .iter()
        .filter_map(|i| match claims::why_taken(i, clusters) {
            None => Some((key(i), size::fits(i, minimum), true)),
            Some(claims::Taken::NotReady) => Some((key(i), size::fits(i, minimum), false)),
            Some(_) => None,
        })
        .collect();
    let short: Vec<String> = takeable
        .iter()
        .filter_map(|(k, f, _)| match f {
            Fit::No(why) => Some(format!("{k} ({why})")),
            _ => None,
        })
        .collect();
    if !takeable.is_empty() && short.len() == takeable.len() {
        return Some(Error::NoServer {
            why: Shortage::NoneMatching,
            message: format!(
                "none of the {} Inventories matching {shown:?} that are not taken has {minimum}: {}; add larger ones, or lower inventoryMinimum",
                takeable.len(),
                short.join(", ")
            ),
        });
    }
    let unread: Vec<&str> = takeable
        .iter()
        .filter(|(_, f, free)| *free && *f == Fit::Unknown)
        .map(|(k, _, _)| k.as_str())
        .collect();
    let free_fit = takeable.iter().any(|(_, f, free)| *free && *f == Fit::Yes);
    (!unread.is_empty() && !free_fit).then(|| Error::NoServer {
        why: Shortage::NotReady,
        message: format!(
            "the minimum asked for is {minimum}, and the size of these free Inventories matching {shown:?} is not read from their BMC yet: {}",
            unread.join(", ")
        ),
    })
}

/// A server's state: released (confirmed off by a delete), else from its last install boot's
/// Job, and once that ran, from the power its Machine reads.
fn state_of(off_confirmed: bool, boot: Option<&JobOutcome>, machine: Option<&str>) -> ServerState {
    if off_confirmed {
        return ServerState::Deprovisioning;
    }
    match boot {
        None => ServerState::Queued,
        Some(JobOutcome::Running) => ServerState::Provisioning,
        Some(JobOutcome::Failed(_)) => ServerState::Failed,
        // Done (or cleaned up after it ran): the BMC's power says the rest.
        Some(JobOutcome::Completed | JobOutcome::Missing) => match machine {
            Some("off") => ServerState::Off,
            _ => ServerState::Active,
        },
    }
}

/// Whether a delete is releasing the claim: its wipe sent, or its power off confirmed.
fn releasing(inventory: &Inventory) -> bool {
    annotation(inventory, OFF_CONFIRMED_ANNOTATION).is_some()
        || annotation(inventory, WIPE_JOB_ANNOTATION).is_some()
}

/// Refuses to act on a claim a delete is releasing.
fn not_releasing(inventory: &Inventory) -> Result<()> {
    if releasing(inventory) {
        return Err(Error::Conflict {
            message: format!(
                "Inventory {} is being released (wiped or confirmed off); finish the delete first",
                key(inventory)
            ),
        });
    }
    Ok(())
}

fn not_on_premises(what: &str) -> Error {
    Error::NotOnPremises {
        message: format!(
            "{what} exists only on a cloud, not for servers on premises (Inventories)"
        ),
    }
}

fn kube_error(e: kube::Error) -> Error {
    match e {
        kube::Error::Api(r) if r.code == 404 => Error::NotFound { message: r.message },
        kube::Error::Api(r) if r.code == 409 => Error::Conflict { message: r.message },
        kube::Error::Api(r) if r.code == 403 => Error::Forbidden { message: r.message },
        kube::Error::Api(r) if r.code == 422 || r.code == 400 => {
            Error::Validation { message: r.message }
        }
        other => Error::Transient {
            message: format!("Kubernetes API: {other}"),
            source: Some(Box::new(other)),
        },
    }
}

fn parse_id(id: &str) -> Result<(&str, &str)> {
    let id = id.strip_prefix(PROVIDER_SCHEME).unwrap_or(id);
    match id.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => Err(Error::InvalidRequest(format!(
            "server id {id:?} is not <namespace>/<name> of an Inventory (or inventory://<namespace>/<name>)"
        ))),
    }
}

/// The install boot whose boot CD is to be ejected: the claim holds, its last install boot
/// was from the CD and reported, and that boot's CD was not ejected yet.
pub fn cd_to_eject(inventory: &Inventory) -> Option<String> {
    claims::claim_of(inventory)?;
    if annotation(inventory, OFF_CONFIRMED_ANNOTATION).is_some()
        || annotation(inventory, BOOTED_FROM_ANNOTATION) != Some("cd")
    {
        return None;
    }
    let boot = annotation(inventory, BOOTS_ANNOTATION)?;
    (annotation(inventory, INSTALLED_ANNOTATION) == Some(boot)
        && annotation(inventory, EJECTED_ANNOTATION) != Some(boot))
    .then(|| boot.to_owned())
}

/// Ejects a claimed server's boot CD once its install reported ([`cd_to_eject`]): a Job named
/// after the claim and the boot (sent once), then the boot recorded as ejected, under the
/// `resourceVersion` read (a conflict is the next pass's).
pub async fn eject_cd(
    client: &Client,
    inventory: &Inventory,
) -> std::result::Result<(), kube::Error> {
    let (Some(boot), Some(claim)) = (cd_to_eject(inventory), claims::claim_of(inventory)) else {
        return Ok(());
    };
    let name = job_name(inventory, &claim, &format!("eject-{boot}"));
    let mut job = power::inventory_job(
        inventory,
        &name,
        (JOB_INVENTORY_LABEL, inventory.name_any()),
        json!([{"virtualMediaAction": {"kind": "CD", "mediaURL": ""}}]),
    )
    .map_err(kube::Error::SerdeError)?;
    job.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(CLAIM_JOB_LABEL.to_owned(), claim_hash(inventory, &claim));
    power::create_once(client, &job).await?;
    let patch = json!({"metadata": {
        "resourceVersion": inventory.resource_version(),
        "annotations": {EJECTED_ANNOTATION: boot},
    }});
    Api::<Inventory>::namespaced(client.clone(), &inventory.namespace().unwrap_or_default())
        .patch(
            &inventory.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(drop)
}

fn annotation<'a>(inventory: &'a Inventory, key: &str) -> Option<&'a str> {
    inventory.annotations().get(key).map(String::as_str)
}

fn boots(inventory: &Inventory) -> u32 {
    annotation(inventory, BOOTS_ANNOTATION)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn key(inventory: &Inventory) -> String {
    format!(
        "{}/{}",
        inventory.namespace().unwrap_or_default(),
        inventory.name_any()
    )
}

/// FNV-1a of the Inventory's uid and the claim: stable across builds and restarts.
fn claim_hash(inventory: &Inventory, claim: &Claim) -> String {
    let text = format!(
        "{}/{}/{}",
        inventory.uid().unwrap_or_default(),
        claim.owner,
        claim.hostname
    );
    format!("{:016x}", fnv(&text))
}

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A Job's name fixed by the Inventory, the claim and what it does: a second create of it is
/// "already exists".
pub fn job_name(inventory: &Inventory, claim: &Claim, what: &str) -> String {
    let hash = fnv(&format!("{}/{what}", claim_hash(inventory, claim)));
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix: String = (0..5)
        .map(|i| char::from(ALPHABET[((hash >> (i * 8)) % ALPHABET.len() as u64) as usize]))
        .collect();
    let mut prefix = format!("{}-{what}", inventory.name_any());
    prefix.truncate(56);
    let prefix = prefix.trim_end_matches('-');
    format!("{prefix}-{suffix}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn inventory() -> Inventory {
        serde_json::from_value(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "server-1", "namespace": "site", "uid": "u1",
                "annotations": {claims::OWNER_ANNOTATION: "pool-a", claims::HOSTNAME_ANNOTATION: "h1"}},
            "spec": {"managementInterfaceMacAddress": "AA:BB:CC:DD:EE:01",
                     "baseboardSpec": {"connection": {"host": "10.0.0.1", "port": 623, "insecureTLS": true,
                        "authSecretRef": {"name": "bmc", "namespace": "site"}}}},
        }))
        .unwrap()
    }

    /// An Inventory of namespace `site`, ready or not, its size read (`cores`) or not.
    fn sized(name: &str, ready: bool, cores: Option<&str>) -> Arc<Inventory> {
        let mut annotations = serde_json::Map::new();
        if let Some(cores) = cores {
            annotations.insert(size::CORES_ANNOTATION.into(), cores.into());
            annotations.insert(
                size::SIZE_READ_ANNOTATION.into(),
                "2026-12-01T00:00:00Z".into(),
            );
        }
        let status = if ready {
            json!({"status": ingot_api::seeder::INVENTORY_NODE_READY})
        } else {
            json!({})
        };
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
                "metadata": {"name": name, "namespace": "site", "annotations": annotations},
                "spec": {"managementInterfaceMacAddress": "AA:BB:CC:DD:EE:01",
                         "baseboardSpec": {"connection": {"host": "10.0.0.1", "port": 623,
                            "insecureTLS": true, "authSecretRef": {"name": "bmc", "namespace": "site"}}}},
                "status": status,
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_size_shortage_names_the_inventories_too_small_or_not_read_yet() {
        let forty = Minimum {
            cores: Some(40),
            ..Minimum::default()
        };
        let answer = |inventories: &[Arc<Inventory>]| {
            let matching: Vec<&Arc<Inventory>> = inventories.iter().collect();
            too_small(&forty, &matching, &[], "rack=a")
        };
        // No minimum: size is never the reason.
        let small = [sized("n1", true, Some("32"))];
        let matching: Vec<&Arc<Inventory>> = small.iter().collect();
        assert!(too_small(&Minimum::default(), &matching, &[], "rack=a").is_none());
        // Every one not taken (ready or not) below it: NoneMatching, each named with its size.
        let Some(Error::NoServer { why, message }) = answer(&[
            sized("n1", true, Some("32")),
            sized("n2", false, Some("16")),
        ]) else {
            panic!()
        };
        assert_eq!(why, Shortage::NoneMatching);
        assert!(
            message.contains("site/n1 (32 cores)") && message.contains("site/n2 (16 cores)"),
            "{message}"
        );
        // A free one whose size is not read yet, and none that fits: NotReady, naming it.
        let Some(Error::NoServer { why, message }) =
            answer(&[sized("n1", true, Some("32")), sized("n3", true, None)])
        else {
            panic!()
        };
        assert_eq!(why, Shortage::NotReady);
        assert!(
            message.contains("not read from their BMC yet: site/n3")
                && !message.contains("site/n1"),
            "{message}"
        );
        // A free one that fits: not the size's fault.
        assert!(answer(&[sized("n3", true, None), sized("n4", true, Some("48"))]).is_none());
        // Unread and not ready: its readiness, not its size, is what the shortage says.
        assert!(answer(&[sized("n1", true, Some("32")), sized("n5", false, None)]).is_none());
    }

    #[test]
    fn job_names_are_fixed_by_the_claim_and_what_they_do() {
        let i = inventory();
        let claim = claims::claim_of(&i).unwrap();
        let boot = job_name(&i, &claim, "boot-1");
        assert_eq!(boot, job_name(&i, &claim, "boot-1"));
        assert!(boot.starts_with("server-1-boot-1-"), "{boot}");
        assert_ne!(boot, job_name(&i, &claim, "boot-2"));
        let other = Claim {
            owner: "pool-a".into(),
            hostname: "h2".into(),
        };
        assert_ne!(boot, job_name(&i, &other, "boot-1"));
        let mut long = i.clone();
        long.metadata.name = Some("n".repeat(80));
        assert!(job_name(&long, &claim, "release-off").len() <= 63);
    }

    #[test]
    fn the_state_follows_the_boot_job_then_the_power() {
        assert_eq!(state_of(false, None, None), ServerState::Queued);
        assert_eq!(
            state_of(false, Some(&JobOutcome::Running), None),
            ServerState::Provisioning
        );
        assert_eq!(
            state_of(false, Some(&JobOutcome::Failed("x".into())), None),
            ServerState::Failed
        );
        assert_eq!(
            state_of(false, Some(&JobOutcome::Completed), Some("on")),
            ServerState::Active
        );
        assert_eq!(
            state_of(false, Some(&JobOutcome::Missing), Some("off")),
            ServerState::Off
        );
        assert_eq!(
            state_of(true, Some(&JobOutcome::Completed), Some("off")),
            ServerState::Deprovisioning
        );
    }

    #[test]
    fn ids_are_namespace_and_name() {
        assert_eq!(parse_id("site/server-1").unwrap(), ("site", "server-1"));
        assert_eq!(
            parse_id("inventory://site/server-1").unwrap(),
            ("site", "server-1")
        );
        for bad in ["server-1", "/x", "a/", "a/b/c"] {
            let e = parse_id(bad).unwrap_err().to_string();
            assert!(e.contains("<namespace>/<name>"), "{e}");
        }
    }
}
