//! The Instance state machine: a typed phase, one function per phase, each returning an
//! explicit [`Outcome`]. The functions read the cloud through the injected `BareMetalCloud`
//! and make only idempotent calls themselves (network, boot config, deleting a server that is
//! being replaced); the calls that must not be repeated (create, reinstall) are returned as
//! outcomes so that the one writer records the intent first. No Kubernetes API here.

use std::time::Duration;

use ingot_api::equinix::{Instance, InstanceSpec, InstanceStatus, instance_status};
use ingot_harvester::{JoinConfig, ManagementNetwork, SHELL_SCRIPT};
use ingot_metal::{
    BareMetalCloud, Boot, BootUpdate, CreateServer, NetworkMode, PortKind, Reinstall, Server,
    ServerState,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::super::Settings;
use super::super::ipxe::{install_script_url, management_interfaces};
use super::OWNER_TAG_PREFIX;

/// Where an Instance is, by its (upstream) status string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `""`: no server yet.
    New,
    /// `queued` (or the original's `submitted`): the server is being provisioned.
    Queued,
    /// `reinstalling`: the server is being installed with Harvester.
    Reinstalling,
    /// `ready`: installed, waiting for the Node.
    Ready,
    /// `managed`: the Node joined.
    Managed,
}

impl Phase {
    pub fn parse(status: &str) -> Option<Phase> {
        Some(match status {
            instance_status::NEW => Phase::New,
            instance_status::QUEUED | instance_status::SUBMITTED => Phase::Queued,
            instance_status::REINSTALLING => Phase::Reinstalling,
            instance_status::READY => Phase::Ready,
            instance_status::MANAGED => Phase::Managed,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::New => instance_status::NEW,
            Phase::Queued => instance_status::QUEUED,
            Phase::Reinstalling => instance_status::REINSTALLING,
            Phase::Ready => instance_status::READY,
            Phase::Managed => instance_status::MANAGED,
        }
    }
}

/// The `Ready` condition to set.
#[derive(Clone, Debug, PartialEq)]
pub struct Ready {
    pub ok: bool,
    pub reason: &'static str,
    pub message: String,
}

/// An Event to record.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Why an Instance cannot progress now, and when to look again.
#[derive(Clone, Debug, PartialEq)]
pub struct Blocked {
    pub reason: &'static str,
    pub message: String,
    pub retry: Duration,
}

/// A new status, written with its condition and Event in one place.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub status: InstanceStatus,
    pub ready: Option<Ready>,
    pub note: Option<Note>,
    pub requeue: Duration,
}

/// What a phase function decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Write a new status (and condition, Event).
    Transition(Transition),
    /// Nothing changed; look again.
    Wait(Duration),
    /// Cannot progress: `Ready=False` with the reason, an Event when it is news.
    Blocked(Blocked),
    /// Create the server (the cloud adopts one with our tag rather than create twice), then
    /// move to `queued` with its id.
    Create { request: Box<CreateServer> },
    /// Record the intent (`reinstallRequestedAt`) in status, request the reinstall, then
    /// write `then`. A restart that finds the intent never requests it again.
    Reinstall {
        server_id: String,
        request: Reinstall,
        then: Transition,
    },
}

/// What a phase function sees.
pub struct Inputs<'a> {
    pub instance: &'a Instance,
    pub settings: &'a Settings,
    pub now: Timestamp,
    /// The join config, for the phases that render one (`None` when not computed).
    pub join: Option<std::result::Result<JoinConfig, Blocked>>,
    /// Whether a Node of the Instance's name exists.
    pub node_exists: bool,
    /// A random factor in [0.8, 1.2] for poll intervals.
    pub jitter: f64,
}

/// The userdata left on a server once its Node joined: no token, no password.
pub const SCRUBBED_USERDATA: &str = "#cloud-config\n# removed by ingot once the node joined: the install config held the join token and the OS password\n";

impl Inputs<'_> {
    fn status(&self) -> InstanceStatus {
        self.instance.status.clone().unwrap_or_default()
    }

    fn name(&self) -> String {
        self.instance.name_any()
    }

    pub fn owner_tag(&self) -> String {
        owner_tag(self.instance)
    }

    fn poll(&self) -> Duration {
        self.settings.poll_interval.mul_f64(self.jitter)
    }

    /// How long the current phase has lasted (from `phaseStartedAt`, else the creation).
    fn in_phase(&self) -> Duration {
        let status = self.status();
        let since = status
            .phase_started_at
            .as_ref()
            .or(self.instance.metadata.creation_timestamp.as_ref())
            .map(|t| t.0)
            .unwrap_or(self.now);
        Duration::try_from(self.now.duration_since(since)).unwrap_or_default()
    }

    fn single_boot(&self) -> bool {
        single_boot(self.instance)
    }

    fn on_premises(&self) -> bool {
        on_premises(self.instance)
    }

    fn transition(&self, status: InstanceStatus, requeue: Duration) -> Transition {
        Transition {
            status,
            ready: None,
            note: None,
            requeue,
        }
    }

    fn join(&self) -> std::result::Result<JoinConfig, Blocked> {
        let join = self.join.clone().unwrap_or_else(|| {
            Err(Blocked {
                reason: "NoJoinConfig",
                message: "the join config was not prepared".to_owned(),
                retry: Duration::from_secs(30),
            })
        })?;
        Ok(customise(join, &self.instance.spec))
    }
}

/// The tag that marks a server as this Instance's.
pub fn owner_tag(instance: &Instance) -> String {
    format!(
        "{OWNER_TAG_PREFIX}{}",
        instance.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// Whether the server comes from Inventories (the pool's `inventorySelector`).
pub fn on_premises(instance: &Instance) -> bool {
    instance.spec.inventory_selector.is_some()
}

/// Whether the first boot installs: `singleBoot`, and always on premises, where the MAC is
/// known before anything boots (the seed's shell boot only showed the MACs).
pub fn single_boot(instance: &Instance) -> bool {
    instance.spec.single_boot == Some(true) || on_premises(instance)
}

/// The pool's install disk and ISO, when it names them.
fn customise(mut join: JoinConfig, spec: &ingot_api::equinix::InstanceSpec) -> JoinConfig {
    if let Some(disk) = spec.install_disk.as_ref().filter(|d| !d.is_empty()) {
        join.device = disk.clone();
    }
    if let Some(iso) = spec.iso_url.as_ref().filter(|u| !u.is_empty()) {
        join.iso_url = iso.clone();
    }
    join
}

type Result<T> = std::result::Result<T, ingot_metal::Error>;

/// Runs the function of `phase`.
pub async fn step(
    phase: Phase,
    inputs: &Inputs<'_>,
    cloud: &dyn BareMetalCloud,
) -> Result<Outcome> {
    match phase {
        Phase::New => new(inputs, cloud).await,
        Phase::Queued => queued(inputs, cloud).await,
        Phase::Reinstalling => reinstalling(inputs, cloud).await,
        Phase::Ready => ready(inputs, cloud).await,
        Phase::Managed => managed(inputs, cloud).await,
    }
}

/// A `status.status` that is none of the phases (written by hand, or by a newer or older
/// version): nothing is done to the server, which may be a live, joined Node, until a person
/// sets a known one.
pub fn unknown_status(status: &InstanceStatus) -> Blocked {
    Blocked {
        reason: "UnknownStatus",
        message: format!(
            "status.status {:?} is not one of \"\", queued, submitted, reinstalling, ready, managed: server {} is left as it is until status.status is set to one of them (managed for a joined Node, \"\" to start over)",
            status.status,
            if status.instance_id.is_empty() {
                "(none)"
            } else {
                status.instance_id.as_str()
            }
        ),
        retry: Duration::from_secs(300),
    }
}

/// `""`: adopt a server with our tag (deleting extras), else create one.
pub async fn new(inputs: &Inputs<'_>, cloud: &dyn BareMetalCloud) -> Result<Outcome> {
    let tag = inputs.owner_tag();
    // On premises the create itself adopts: it finds the Inventory claimed for this Instance
    // and carries on from the last step recorded (a claim whose boot was never sent is booted).
    if inputs.on_premises() {
        return Ok(match create_request(inputs, tag) {
            Ok(request) => Outcome::Create {
                request: Box::new(request),
            },
            Err(blocked) => Outcome::Blocked(blocked),
        });
    }
    let ours: Vec<Server> = cloud
        .list_servers(&tag)
        .await?
        .into_iter()
        .filter(|s| !s.state.is_gone())
        .collect();
    if !ours.is_empty() {
        return adopt(inputs, cloud, ours).await;
    }
    Ok(match create_request(inputs, tag) {
        Ok(request) => Outcome::Create {
            request: Box::new(request),
        },
        Err(blocked) => Outcome::Blocked(blocked),
    })
}

/// Keeps the server furthest along (active first) and deletes the others: a server is never
/// duplicated, whatever crashed where.
async fn adopt(
    inputs: &Inputs<'_>,
    cloud: &dyn BareMetalCloud,
    mut ours: Vec<Server>,
) -> Result<Outcome> {
    ours.sort_by_key(|s| (s.state != ServerState::Active, s.id.clone()));
    let keep = ours.remove(0);
    for extra in &ours {
        cloud.delete_server(&extra.id).await?;
    }
    let mut status = inputs.status();
    status.status = instance_status::QUEUED.to_owned();
    status.instance_id = keep.id.clone();
    let mut transition = inputs.transition(status, Duration::ZERO);
    transition.note = Some(Note {
        warning: false,
        reason: "ServerAdopted",
        message: if ours.is_empty() {
            format!(
                "server {} already carries this Instance's tag: adopted",
                keep.id
            )
        } else {
            format!(
                "server {} already carries this Instance's tag: adopted; deleted {} extra",
                keep.id,
                ours.len()
            )
        },
    });
    Ok(Outcome::Transition(transition))
}

/// The server to create, carrying the owner tag, as the spec asks for it.
fn create_request(inputs: &Inputs<'_>, tag: String) -> std::result::Result<CreateServer, Blocked> {
    let spec = &inputs.instance.spec;
    if inputs.on_premises() {
        // An Inventory is claimed: no plan or metro; the install travels as the userdata.
        let boot = Boot::Ipxe {
            script_url: None,
            always: false,
        };
        let mut request = CreateServer::new(inputs.name(), String::new(), String::new(), tag, boot);
        request.userdata = Some(install_request(inputs)?);
        return Ok(request);
    }
    let (Some(plan), Some(metro)) = (spec.plan.clone(), spec.metro.clone()) else {
        return Err(Blocked {
            reason: "InvalidSpec",
            message: "spec.plan and spec.metro are required to create a server".to_owned(),
            retry: Duration::from_secs(300),
        });
    };
    let (boot, userdata) = first_boot(inputs)?;
    let mut request = CreateServer::new(inputs.name(), plan, metro, tag, boot);
    request.userdata = Some(userdata);
    request.tags = spec.tags.clone().unwrap_or_default();
    request.billing = match spec.billing_cycle.as_deref() {
        Some("daily") => Some(ingot_metal::Billing::Daily),
        Some("monthly") => Some(ingot_metal::Billing::Monthly),
        Some("yearly") => Some(ingot_metal::Billing::Yearly),
        Some("hourly") => Some(ingot_metal::Billing::Hourly),
        _ => None,
    };
    if spec.spot_instance == Some(true) {
        request.spot_price_max = spec.spot_price_max.as_deref().and_then(|p| p.parse().ok());
    }
    request.reservation_id = spec
        .hardware_reservation_id
        .clone()
        .filter(|r| !r.is_empty());
    request.project_ssh_keys = spec.project_ssh_keys.clone().unwrap_or_default();
    request.user_ssh_keys = spec.user_ssh_keys.clone().unwrap_or_default();
    Ok(request)
}

/// What a server on premises installs (`onprem::install::InstallRequest`, as JSON): the join
/// config's release, cluster address, token and password, with the pool's disk and bond.
fn install_request(inputs: &Inputs<'_>) -> std::result::Result<String, Blocked> {
    let join = inputs.join()?;
    let spec = &inputs.instance.spec;
    let request = crate::onprem::install::InstallRequest {
        version: join.version.to_string(),
        image_url: inputs
            .settings
            .harvester_mirror
            .clone()
            .unwrap_or_else(|| ingot_harvester::DEFAULT_RELEASE_BASE.to_owned()),
        vip: join.server.clone(),
        token: join.token.expose().to_owned(),
        os_password: join.password.expose().to_owned(),
        disk: spec.install_disk.clone().filter(|d| !d.is_empty()),
        bond_options: spec.management_bonding_options.clone(),
        ssh_keys: Vec::new(),
        vlan_id: management_vlan(spec)?,
    };
    serde_json::to_string(&request).map_err(|e| Blocked {
        reason: "InvalidConfig",
        message: format!("the install request could not be written: {e}"),
        retry: Duration::from_secs(300),
    })
}

/// On premises, the management network's VLAN: the one entry of
/// `networkingConfiguration.interfaceConfiguration` (`eth0` or `bond0`, one VLAN number), which
/// goes into the install config; no entry, none. The API server refuses anything else; what it
/// let through is refused here, naming the field.
fn management_vlan(spec: &InstanceSpec) -> std::result::Result<Option<u32>, Blocked> {
    let entries: Vec<_> = spec
        .networking_configuration
        .iter()
        .flat_map(|n| n.interface_configuration.iter().flatten())
        .collect();
    let refused = |what: String| Blocked {
        reason: "InvalidNetworking",
        message: format!(
            "spec.networkingConfiguration.interfaceConfiguration {what}: on premises it only sets the management network's VLAN, one entry named eth0 or bond0 with one VLAN number"
        ),
        retry: Duration::from_secs(300),
    };
    match entries.as_slice() {
        [] => Ok(None),
        [entry] => {
            let name = entry.name.as_deref().unwrap_or_default();
            if name != "eth0" && name != "bond0" {
                return Err(refused(format!("names {name:?}")));
            }
            match entry.vlan_ids.as_deref().unwrap_or_default() {
                [vlan] => match vlan.parse::<u32>() {
                    Ok(id @ 1..=4094) => Ok((id > 1).then_some(id)),
                    _ => Err(refused(format!(
                        "has the VLAN {vlan:?}, not a number from 1 to 4094"
                    ))),
                },
                vlans => Err(refused(format!("has {} VLANs", vlans.len()))),
            }
        }
        more => Err(refused(format!("has {} entries", more.len()))),
    }
}

/// The first boot and its userdata.
fn first_boot(inputs: &Inputs<'_>) -> std::result::Result<(Boot, String), Blocked> {
    if !inputs.single_boot() {
        // The seed's first boot: an iPXE shell, so the server turns active and shows its MAC
        // addresses before anything is installed.
        let shell = Boot::Ipxe {
            script_url: None,
            always: false,
        };
        return Ok((shell, SHELL_SCRIPT.to_owned()));
    }
    // The first boot installs: the iPXE script, the config in the userdata.
    let script_url =
        install_script_url(inputs.settings, inputs.instance).ok_or_else(no_ipxe_url)?;
    let userdata = inputs
        .join()?
        .render_intermediate()
        .map_err(invalid_config)?;
    let boot = Boot::Ipxe {
        script_url: Some(script_url),
        always: false,
    };
    Ok((boot, userdata))
}

/// `queued`: once active, wire the network; seed flow: render the final config and reinstall.
pub async fn queued(inputs: &Inputs<'_>, cloud: &dyn BareMetalCloud) -> Result<Outcome> {
    if let Some(outcome) = confirm_requested_reinstall(inputs) {
        return Ok(outcome);
    }
    let server = match current_server(inputs, cloud).await? {
        Ok(server) => server,
        Err(outcome) => return Ok(outcome),
    };
    match &server.state {
        ServerState::Active => {}
        ServerState::Failed => return replace(inputs, cloud, &server, failed_note(&server)).await,
        state if state.is_in_progress() => {
            return timeout_or_wait(
                inputs,
                cloud,
                &server,
                inputs.settings.provision_timeout,
                "ProvisioningTimeout",
                "did not become active",
            )
            .await;
        }
        other => {
            return Ok(Outcome::Blocked(Blocked {
                reason: "UnexpectedServerState",
                message: format!(
                    "server {} is {other:?}; waiting for it to become active",
                    server.id
                ),
                retry: Duration::from_secs(30),
            }));
        }
    }
    let server = match apply_network(inputs, cloud, &server).await? {
        Ok(server) => server,
        Err(blocked) => return Ok(Outcome::Blocked(blocked)),
    };
    if inputs.single_boot() {
        // The first boot was the install: no reinstall.
        return Ok(Outcome::Transition(installed(inputs, &server)));
    }
    let Some(script_url) = install_script_url(inputs.settings, inputs.instance) else {
        return Ok(Outcome::Blocked(no_ipxe_url()));
    };
    reinstall(inputs, cloud, &server, script_url, None).await
}

/// Renders the final config onto the server and returns the reinstall into the installer;
/// `retry` is the attempt and how long the last install waited for its Node.
async fn reinstall(
    inputs: &Inputs<'_>,
    cloud: &dyn BareMetalCloud,
    server: &Server,
    script_url: String,
    retry: Option<(i64, Duration)>,
) -> Result<Outcome> {
    let (config, userdata) = match final_config(inputs, server) {
        Ok(rendered) => rendered,
        Err(blocked) => return Ok(Outcome::Blocked(blocked)),
    };
    // Idempotent: the same config every time (re-rendered on a retry).
    cloud
        .update_boot(
            &server.id,
            &BootUpdate {
                ipxe_script_url: None,
                userdata: Some(userdata),
                always_pxe: None,
            },
        )
        .await?;
    let mut status = inputs.status();
    status.status = instance_status::REINSTALLING.to_owned();
    status.reinstall_requested_at = None;
    let (ready, note) = match retry {
        None => (
            Ready {
                ok: false,
                reason: "Installing",
                message: format!("server {} is installing Harvester", server.id),
            },
            Note {
                warning: false,
                reason: "Installing",
                message: format!(
                    "server {} reinstalls into Harvester, joining {}",
                    server.id, config.server
                ),
            },
        ),
        Some((attempt, waited)) => {
            status.install_retries = Some(attempt);
            install_retried(inputs.settings, &server.id, attempt, waited)
        }
    };
    Ok(Outcome::Reinstall {
        server_id: server.id.clone(),
        request: into_installer(Some(script_url)),
        then: Transition {
            status,
            ready: Some(ready),
            note: Some(note),
            requeue: inputs.poll(),
        },
    })
}

/// The join config and the final Harvester config rendered from it for this server's ports.
fn final_config(
    inputs: &Inputs<'_>,
    server: &Server,
) -> std::result::Result<(JoinConfig, String), Blocked> {
    let spec = &inputs.instance.spec;
    let ports: Vec<ingot_harvester::Port> = server.ports.iter().map(harvester_port).collect();
    let bond_options = spec.management_bonding_options.clone().unwrap_or_default();
    let mgmt = ManagementNetwork::from_ports(&management_interfaces(spec), &ports, bond_options)
        .map_err(|error| Blocked {
            reason: "InvalidManagementInterfaces",
            message: error.to_string(),
            retry: Duration::from_secs(300),
        })?;
    let config = inputs.join()?;
    let userdata = config.render_final(&mgmt).map_err(invalid_config)?;
    Ok((config, userdata))
}

/// A reinstall into the installer the script boots (on premises: the claim's install files),
/// keeping the disks.
fn into_installer(script_url: Option<String>) -> Reinstall {
    Reinstall {
        preserve_data: true,
        deprovision_fast: true,
        os: None,
        ipxe_script_url: script_url,
    }
}

/// The condition and Event of install retry `attempt`, after `waited` without a Node.
fn install_retried(
    settings: &Settings,
    server_id: &str,
    attempt: i64,
    waited: Duration,
) -> (Ready, Note) {
    let message = format!(
        "no Node joined within {}s of the install; installing server {server_id} again (retry {attempt} of {})",
        waited.as_secs(),
        settings.install_retries
    );
    (
        Ready {
            ok: false,
            reason: "InstallRetried",
            message: message.clone(),
        },
        Note {
            warning: true,
            reason: "InstallRetried",
            message,
        },
    )
}

/// What is written before a reinstall is requested: the intent (`reinstallRequestedAt`) and the
/// retry count the reinstall will use up. A crash after the call then finds both: the reinstall
/// is not requested again, and the retry is counted, so retries stay capped across crashes.
pub fn reinstall_intent(
    current: &InstanceStatus,
    then: &InstanceStatus,
    now: Timestamp,
) -> InstanceStatus {
    let mut intent = current.clone();
    intent.reinstall_requested_at = Some(Time(now));
    intent.install_retries = then.install_retries;
    intent
}

/// A reinstall whose intent was recorded but whose confirmation was not (a crash between
/// them): it may have been requested, so it is taken as requested, never repeated.
fn confirm_requested_reinstall(inputs: &Inputs<'_>) -> Option<Outcome> {
    let status = inputs.status();
    status.reinstall_requested_at.as_ref()?;
    let mut next = status.clone();
    next.status = instance_status::REINSTALLING.to_owned();
    next.reinstall_requested_at = None;
    let mut transition = inputs.transition(next, inputs.poll());
    transition.note = Some(Note {
        warning: false,
        reason: "ReinstallAssumed",
        message: format!(
            "a reinstall of server {} was requested before a restart; waiting for it rather than requesting another",
            status.instance_id
        ),
    });
    Some(Outcome::Transition(transition))
}

/// `reinstalling`: active again means installed.
pub async fn reinstalling(inputs: &Inputs<'_>, cloud: &dyn BareMetalCloud) -> Result<Outcome> {
    let server = match current_server(inputs, cloud).await? {
        Ok(server) => server,
        Err(outcome) => return Ok(outcome),
    };
    match &server.state {
        ServerState::Active => Ok(Outcome::Transition(installed(inputs, &server))),
        ServerState::Failed => replace(inputs, cloud, &server, failed_note(&server)).await,
        _ => {
            timeout_or_wait(
                inputs,
                cloud,
                &server,
                inputs.settings.reinstall_timeout,
                "ReinstallTimeout",
                "did not come back from its reinstall",
            )
            .await
        }
    }
}

/// `ready`: wait for the Node; install again when none joined in time (at most
/// `install_retries` times, each wait doubled), then replace the server.
pub async fn ready(inputs: &Inputs<'_>, cloud: &dyn BareMetalCloud) -> Result<Outcome> {
    if let Some(outcome) = confirm_requested_reinstall(inputs) {
        return Ok(outcome);
    }
    if inputs.node_exists {
        return Ok(joined(inputs));
    }
    // A server that vanishes while the Node is awaited is noticed here.
    let server = match current_server(inputs, cloud).await? {
        Ok(server) => server,
        Err(outcome) => return Ok(outcome),
    };
    let status = inputs.status();
    let retries = status.install_retries.unwrap_or(0).max(0);
    let wait = install_wait(inputs.settings, retries);
    let started = status
        .install_started_at
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(inputs.now);
    let waited = Duration::try_from(inputs.now.duration_since(started)).unwrap_or_default();
    if waited < wait {
        // Node events wake this up; the requeue bounds the wait and the vanish check.
        return Ok(Outcome::Wait(
            (wait - waited).min(inputs.poll().max(Duration::from_secs(30))),
        ));
    }
    if retries >= i64::from(inputs.settings.install_retries) {
        let note = Note {
            warning: true,
            reason: "InstallFailed",
            message: format!(
                "no Node joined after {} installs of server {}; replacing the server",
                retries + 1,
                server.id
            ),
        };
        return replace(inputs, cloud, &server, note).await;
    }
    let retry = (retries + 1, waited);
    if inputs.on_premises() {
        // The claim's install files are booted again; there is no script URL to give.
        return Ok(install_again(inputs, &server, None, retry));
    }
    let Some(script_url) = install_script_url(inputs.settings, inputs.instance) else {
        return Ok(Outcome::Blocked(no_ipxe_url()));
    };
    if inputs.single_boot() {
        return Ok(install_again(inputs, &server, Some(script_url), retry));
    }
    reinstall(inputs, cloud, &server, script_url, Some(retry)).await
}

/// The Node joined: `managed`.
fn joined(inputs: &Inputs<'_>) -> Outcome {
    let mut status = inputs.status();
    status.status = instance_status::MANAGED.to_owned();
    let mut transition = inputs.transition(status, Duration::ZERO);
    transition.ready = Some(Ready {
        ok: true,
        reason: "Joined",
        message: "the server joined the cluster as a Node".to_owned(),
    });
    transition.note = Some(Note {
        warning: false,
        reason: "Joined",
        message: "the Node joined the cluster".to_owned(),
    });
    Outcome::Transition(transition)
}

/// Single boot has no rendered final config: the script carries the MACs, so a retry is the
/// same install again.
fn install_again(
    inputs: &Inputs<'_>,
    server: &Server,
    script_url: Option<String>,
    (attempt, waited): (i64, Duration),
) -> Outcome {
    let mut status = inputs.status();
    status.status = instance_status::REINSTALLING.to_owned();
    status.install_retries = Some(attempt);
    status.reinstall_requested_at = None;
    let (ready, note) = install_retried(inputs.settings, &server.id, attempt, waited);
    Outcome::Reinstall {
        server_id: server.id.clone(),
        request: into_installer(script_url),
        then: Transition {
            status,
            ready: Some(ready),
            note: Some(note),
            requeue: inputs.poll(),
        },
    }
}

/// How long to wait for the Node after `retries` retries: the retry period doubled per retry,
/// at most four times it.
pub fn install_wait(settings: &Settings, retries: i64) -> Duration {
    let exp = u32::try_from(retries.clamp(0, 2)).unwrap_or(0);
    settings.install_retry.saturating_mul(1 << exp)
}

/// `managed`: take the join token and OS password out of the server's userdata, once.
pub async fn managed(inputs: &Inputs<'_>, cloud: &dyn BareMetalCloud) -> Result<Outcome> {
    let status = inputs.status();
    if status.userdata_scrubbed == Some(true) {
        return Ok(Outcome::Wait(Duration::from_secs(3600)));
    }
    match cloud
        .update_boot(
            &status.instance_id,
            &BootUpdate {
                ipxe_script_url: None,
                userdata: Some(SCRUBBED_USERDATA.to_owned()),
                always_pxe: None,
            },
        )
        .await
    {
        // On premises nothing of the install is kept with the server: the claim's install
        // files go with its release.
        Ok(_)
        | Err(ingot_metal::Error::NotFound { .. } | ingot_metal::Error::NotOnPremises { .. }) => {}
        Err(error) => return Err(error),
    }
    let mut next = status;
    next.userdata_scrubbed = Some(true);
    Ok(Outcome::Transition(
        inputs.transition(next, Duration::from_secs(3600)),
    ))
}

/// The Instance's server, or the outcome when it is gone (back to `""`: a new one is made).
async fn current_server(
    inputs: &Inputs<'_>,
    cloud: &dyn BareMetalCloud,
) -> Result<std::result::Result<Server, Outcome>> {
    let status = inputs.status();
    let id = status.instance_id.clone();
    let gone = if id.is_empty() {
        true
    } else {
        match cloud.get_server(&id).await {
            Ok(server) if !server.state.is_gone() => {
                // Reinstalled, reconfigured or deleted from here on: only if it is ours.
                if !owns(inputs.instance, &server) {
                    return Ok(Err(Outcome::Blocked(not_owned(inputs.instance, &server))));
                }
                return Ok(Ok(server));
            }
            Ok(_) | Err(ingot_metal::Error::NotFound { .. }) => true,
            Err(error) => return Err(error),
        }
    };
    debug_assert!(gone);
    Ok(Err(Outcome::Transition(start_over(
        inputs,
        Note {
            warning: true,
            reason: "ServerVanished",
            message: format!("server {id} is gone; creating a new one"),
        },
    ))))
}

/// Whether `server` is this Instance's: it carries the Instance's tag, or it carries no
/// Instance's tag at all and has the Instance's name as hostname (a server the Go addon made,
/// which tagged nothing). A server found by the id in `status.instanceID` is never reinstalled
/// or deleted otherwise: the id may have been edited, or copied from another Instance.
pub fn owns(instance: &Instance, server: &Server) -> bool {
    let tag = format!(
        "{OWNER_TAG_PREFIX}{}",
        instance.metadata.uid.as_deref().unwrap_or_default()
    );
    if server.tags.contains(&tag) {
        return true;
    }
    !server.tags.iter().any(|t| t.starts_with(OWNER_TAG_PREFIX))
        && server.hostname == instance.name_any()
}

/// Why a server named in `status.instanceID` is left alone.
pub fn not_owned(instance: &Instance, server: &Server) -> Blocked {
    Blocked {
        reason: "ServerNotOwned",
        message: format!(
            "server {} (hostname {:?}) named in status.instanceID carries neither the tag {OWNER_TAG_PREFIX}{} nor this Instance's hostname: it is not reinstalled or deleted; correct status.instanceID",
            server.id,
            server.hostname,
            instance.metadata.uid.as_deref().unwrap_or_default()
        ),
        retry: Duration::from_secs(300),
    }
}

/// Back to `""` (a new server is made), keeping nothing of the old one.
fn start_over(inputs: &Inputs<'_>, note: Note) -> Transition {
    let mut status = inputs.status();
    status.status = instance_status::NEW.to_owned();
    status.instance_id = String::new();
    status.public_ip = String::new();
    status.private_ip = String::new();
    status.install_started_at = None;
    status.install_retries = None;
    status.reinstall_requested_at = None;
    status.userdata_scrubbed = None;
    Transition {
        status,
        ready: Some(Ready {
            ok: false,
            reason: note.reason,
            message: note.message.clone(),
        }),
        note: Some(note),
        requeue: Duration::from_secs(1),
    }
}

/// Deletes the server and starts over.
async fn replace(
    inputs: &Inputs<'_>,
    cloud: &dyn BareMetalCloud,
    server: &Server,
    note: Note,
) -> Result<Outcome> {
    cloud.delete_server(&server.id).await?;
    Ok(Outcome::Transition(start_over(inputs, note)))
}

fn failed_note(server: &Server) -> Note {
    Note {
        warning: true,
        reason: "ProvisioningFailed",
        message: format!(
            "server {} failed to provision; deleting it and creating a new one",
            server.id
        ),
    }
}

/// Waits while the phase is younger than `timeout`; past it, replaces the server.
async fn timeout_or_wait(
    inputs: &Inputs<'_>,
    cloud: &dyn BareMetalCloud,
    server: &Server,
    timeout: Duration,
    reason: &'static str,
    what: &str,
) -> Result<Outcome> {
    let in_phase = inputs.in_phase();
    if in_phase <= timeout {
        return Ok(Outcome::Wait(inputs.poll()));
    }
    let note = Note {
        warning: true,
        reason,
        message: format!(
            "server {} {what} within {}s; deleting it and creating a new one",
            server.id,
            timeout.as_secs()
        ),
    };
    replace(inputs, cloud, server, note).await
}

/// Installed: fill in the addresses, start the install clock, wait for the Node.
fn installed(inputs: &Inputs<'_>, server: &Server) -> Transition {
    let mut status = inputs.status();
    status.status = instance_status::READY.to_owned();
    status.public_ip = server
        .management_address(true, 4)
        .unwrap_or_default()
        .to_owned();
    status.private_ip = server
        .management_address(false, 4)
        .unwrap_or_default()
        .to_owned();
    status.reinstall_requested_at = None;
    // The clock of the install retry starts now that the server is active.
    status.install_started_at = Some(Time(inputs.now));
    Transition {
        status,
        ready: Some(Ready {
            ok: false,
            reason: "Joining",
            message: "Harvester is installed; waiting for the Node to join".to_owned(),
        }),
        note: None,
        requeue: Duration::from_secs(1),
    }
}

/// Network mode and VLANs, as the pool asked; idempotent (the provider reads port state).
async fn apply_network(
    inputs: &Inputs<'_>,
    cloud: &dyn BareMetalCloud,
    server: &Server,
) -> Result<std::result::Result<Server, Blocked>> {
    // On premises the VLAN is in the install config, and the ports are the site's.
    if inputs.on_premises() {
        return Ok(Ok(server.clone()));
    }
    let Some(networking) = &inputs.instance.spec.networking_configuration else {
        return Ok(Ok(server.clone()));
    };
    let mut server = server.clone();
    if let Some(mode) = networking.type_.as_deref().filter(|t| !t.is_empty()) {
        let Some(mode) = NetworkMode::parse(mode) else {
            return Ok(Err(Blocked {
                reason: "InvalidNetworkType",
                message: format!(
                    "spec.networkingConfiguration.type {mode:?} is not a Metal network type"
                ),
                retry: Duration::from_secs(300),
            }));
        };
        server = cloud.set_network_mode(&server.id, mode).await?;
    }
    for interface in networking.interface_configuration.iter().flatten() {
        let Some(name) = interface.name.as_deref() else {
            continue;
        };
        let vlans = interface.vlan_ids.clone().unwrap_or_default();
        if vlans.is_empty() {
            continue;
        }
        let Some(port) = server.port(name) else {
            let existing: Vec<&str> = server.ports.iter().map(|p| p.name.as_str()).collect();
            return Ok(Err(Blocked {
                reason: "NoSuchPort",
                message: format!(
                    "networkingConfiguration names port {name}, which server {} does not have (it has {existing:?})",
                    server.id
                ),
                retry: Duration::from_secs(300),
            }));
        };
        if inputs.instance.spec.create_missing_vlans == Some(true) {
            for vxlan in vlans.iter().filter_map(|v| v.parse::<u32>().ok()) {
                let description = format!("created by ingot for {}", inputs.name());
                cloud
                    .ensure_vlan(&server.location, vxlan, &description)
                    .await?;
            }
        }
        cloud.assign_vlans(&port.id, &vlans).await?;
    }
    Ok(Ok(cloud.get_server(&server.id).await?))
}

fn harvester_port(port: &ingot_metal::Port) -> ingot_harvester::Port {
    let kind = match port.kind {
        PortKind::Bond => ingot_harvester::PortKind::Bond,
        PortKind::Physical => ingot_harvester::PortKind::Physical,
    };
    ingot_harvester::Port {
        name: port.name.clone(),
        kind,
        mac: port.mac.clone(),
    }
}

pub(crate) fn no_ipxe_url() -> Blocked {
    Blocked {
        reason: "NoIpxeUrl",
        message: "no URL for the install iPXE script: start ingot with --ipxe-base-url (where servers reach ingot), or set the pool's ipxeScriptUrl".to_owned(),
        retry: Duration::from_secs(60),
    }
}

fn invalid_config(error: ingot_harvester::ConfigError) -> Blocked {
    Blocked {
        reason: "InvalidConfig",
        message: error.to_string(),
        retry: Duration::from_secs(300),
    }
}
