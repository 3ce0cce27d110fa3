//! Every phase transition, with an injected provider: no HTTP, no API server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use ingot_api::equinix::{Instance, InstanceSpec, InstanceStatus};
use ingot_harvester::{HarvesterVersion, JoinConfig, Secret};
use ingot_metal::{
    BareMetalCloud, BootUpdate, CapacityLevel, CreateServer, Error, Location, NetworkMode,
    PlanInfo, Port, PortKind, PowerAction, Reinstall, Server, ServerState, Vlan,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::super::Settings;
use super::phase::{self, Blocked, Inputs, Outcome, Phase, SCRUBBED_USERDATA};

type Result<T> = std::result::Result<T, Error>;

/// A cloud in memory; `fail` makes every call return that error's kind.
#[derive(Default)]
struct FakeCloud {
    servers: Mutex<BTreeMap<String, Server>>,
    deleted: Mutex<Vec<String>>,
    boot_updates: Mutex<Vec<(String, BootUpdate)>>,
    fail: Mutex<Option<&'static str>>,
}

impl FakeCloud {
    fn with(servers: Vec<Server>) -> Self {
        let cloud = FakeCloud::default();
        for server in servers {
            cloud
                .servers
                .lock()
                .unwrap()
                .insert(server.id.clone(), server);
        }
        cloud
    }

    fn check(&self) -> Result<()> {
        match *self.fail.lock().unwrap() {
            None => Ok(()),
            Some("forbidden") => Err(Error::Forbidden {
                message: "project is read-only".into(),
            }),
            Some(_) => Err(Error::Transient {
                message: "connection reset".into(),
                source: None,
            }),
        }
    }
}

fn server(id: &str, state: ServerState, tag: &str) -> Server {
    Server {
        id: id.to_owned(),
        provider_id: format!("equinixmetal://sg/{id}"),
        hostname: "pool-abcdefgh".to_owned(),
        state,
        plan: "c3.small.x86".to_owned(),
        location: "sg".to_owned(),
        tags: vec![tag.to_owned()],
        ports: vec![Port {
            id: format!("{id}-eth0"),
            name: "eth0".to_owned(),
            kind: PortKind::Physical,
            mac: Some("0c:c4:7a:00:00:01".to_owned()),
            bonded: true,
            mode: None,
            vlans: vec![],
        }],
        addresses: vec![],
        ipxe_script_url: None,
        always_pxe: false,
        network_mode: None,
    }
}

#[async_trait]
impl BareMetalCloud for FakeCloud {
    fn name(&self) -> &'static str {
        "fake"
    }
    async fn create_server(&self, spec: &CreateServer) -> Result<Server> {
        self.create_missing_server(spec).await
    }
    async fn create_missing_server(&self, spec: &CreateServer) -> Result<Server> {
        self.check()?;
        let id = format!("srv-{}", self.servers.lock().unwrap().len());
        let mut created = server(&id, ServerState::Queued, &spec.owner_tag);
        created.hostname = spec.hostname.clone();
        self.servers.lock().unwrap().insert(id, created.clone());
        Ok(created)
    }
    async fn get_server(&self, id: &str) -> Result<Server> {
        self.check()?;
        self.servers
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                message: id.to_owned(),
            })
    }
    async fn find_server(&self, owner_tag: &str, _hostname: &str) -> Result<Option<Server>> {
        Ok(self.list_servers(owner_tag).await?.into_iter().next())
    }
    async fn list_servers(&self, owner_tag: &str) -> Result<Vec<Server>> {
        self.check()?;
        Ok(self
            .servers
            .lock()
            .unwrap()
            .values()
            .filter(|s| s.tags.iter().any(|t| t == owner_tag))
            .cloned()
            .collect())
    }
    async fn update_boot(&self, id: &str, update: &BootUpdate) -> Result<Server> {
        self.check()?;
        self.boot_updates
            .lock()
            .unwrap()
            .push((id.to_owned(), update.clone()));
        self.get_server(id).await
    }
    async fn reinstall(&self, _id: &str, _reinstall: &Reinstall) -> Result<()> {
        panic!("reinstalls are made by the reconciler, never by a phase function")
    }
    async fn power(&self, _id: &str, _action: PowerAction) -> Result<()> {
        Err(Error::InvalidRequest("not used".into()))
    }
    async fn delete_server(&self, id: &str) -> Result<()> {
        self.check()?;
        self.servers.lock().unwrap().remove(id);
        self.deleted.lock().unwrap().push(id.to_owned());
        Ok(())
    }
    async fn set_network_mode(&self, id: &str, _mode: NetworkMode) -> Result<Server> {
        self.get_server(id).await
    }
    async fn assign_vlans(&self, _port_id: &str, _vlans: &[String]) -> Result<Port> {
        Err(Error::InvalidRequest("not used".into()))
    }
    async fn unassign_vlans(&self, _port_id: &str, _vlans: &[String]) -> Result<Port> {
        Err(Error::InvalidRequest("not used".into()))
    }
    async fn list_vlans(&self, _location: &str) -> Result<Vec<Vlan>> {
        Ok(vec![])
    }
    async fn ensure_vlan(&self, _location: &str, _vxlan: u32, _d: &str) -> Result<Vlan> {
        Err(Error::InvalidRequest("not used".into()))
    }
    async fn plans(&self) -> Result<Vec<PlanInfo>> {
        Ok(vec![])
    }
    async fn locations(&self) -> Result<Vec<Location>> {
        Ok(vec![])
    }
    async fn capacity(&self, _plan: &str, _location: &str) -> Result<CapacityLevel> {
        Ok(CapacityLevel::Normal)
    }
}

const UID: &str = "0b6f1b3e-uid";
const TAG: &str = "ingot-instance:0b6f1b3e-uid";

fn now() -> Timestamp {
    "2026-03-01T12:00:00Z".parse().unwrap()
}

fn ago(secs: i64) -> Option<Time> {
    Some(Time(now() - SignedDuration::from_secs(secs)))
}

fn instance(status: InstanceStatus) -> Instance {
    let mut instance = Instance::new(
        "pool-abcdefgh",
        InstanceSpec {
            plan: Some("c3.small.x86".into()),
            metro: Some("sg".into()),
            ..InstanceSpec::default()
        },
    );
    instance.metadata.uid = Some(UID.into());
    instance.metadata.creation_timestamp = ago(3600);
    instance.status = Some(status);
    instance
}

fn settings() -> Settings {
    Settings {
        ipxe_base_url: Some("http://ingot.example:8080".into()),
        install_retry: Duration::from_secs(600),
        install_retries: 2,
        provision_timeout: Duration::from_secs(1800),
        reinstall_timeout: Duration::from_secs(1800),
        ..Settings::default()
    }
}

fn join() -> JoinConfig {
    JoinConfig::new(
        HarvesterVersion::parse_or_default(None).unwrap(),
        "192.0.2.44",
        Secret::new("K10-join-token"),
        "pool-abcdefgh",
        Secret::new("os-password"),
        "http://mirror.example/harvester.iso",
    )
}

fn status(phase: &str, id: &str) -> InstanceStatus {
    InstanceStatus {
        status: phase.to_owned(),
        instance_id: id.to_owned(),
        ..InstanceStatus::default()
    }
}

async fn run(
    instance: &Instance,
    settings: &Settings,
    cloud: &FakeCloud,
    node_exists: bool,
) -> Result<Outcome> {
    let phase = Phase::parse(&instance.status.clone().unwrap_or_default().status).unwrap();
    let inputs = Inputs {
        instance,
        settings,
        now: now(),
        join: Some(Ok(join())),
        node_exists,
        jitter: 1.0,
    };
    phase::step(phase, &inputs, cloud).await
}

fn transition(outcome: Outcome) -> phase::Transition {
    match outcome {
        Outcome::Transition(t) => t,
        other => panic!("expected a transition, got {other:?}"),
    }
}

#[test]
fn phases_parse_the_original_strings() {
    assert_eq!(Phase::parse(""), Some(Phase::New));
    assert_eq!(Phase::parse("submitted"), Some(Phase::Queued));
    assert_eq!(Phase::parse("managed"), Some(Phase::Managed));
    assert_eq!(Phase::parse("bogus"), None);
    for phase in [
        Phase::New,
        Phase::Queued,
        Phase::Reinstalling,
        Phase::Ready,
        Phase::Managed,
    ] {
        assert_eq!(Phase::parse(phase.as_str()), Some(phase));
    }
}

#[tokio::test]
async fn new_creates_a_server_with_the_owner_tag() {
    let cloud = FakeCloud::default();
    let outcome = run(&instance(status("", "")), &settings(), &cloud, false)
        .await
        .unwrap();
    let Outcome::Create { request } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(request.owner_tag, TAG);
    assert_eq!(request.hostname, "pool-abcdefgh");
    assert!(request.userdata.unwrap().starts_with("#!ipxe"));
}

#[tokio::test]
async fn new_adopts_a_server_with_its_tag_and_deletes_extras() {
    let cloud = FakeCloud::with(vec![
        server("a", ServerState::Provisioning, TAG),
        server("b", ServerState::Active, TAG),
        server("c", ServerState::Queued, TAG),
        server("other", ServerState::Active, "ingot-instance:someone-else"),
    ]);
    let t = transition(
        run(&instance(status("", "")), &settings(), &cloud, false)
            .await
            .unwrap(),
    );
    assert_eq!(t.status.status, "queued");
    assert_eq!(t.status.instance_id, "b", "the active one is kept");
    let mut deleted = cloud.deleted.lock().unwrap().clone();
    deleted.sort();
    assert_eq!(deleted, ["a", "c"]);
    assert_eq!(t.note.unwrap().reason, "ServerAdopted");
}

#[tokio::test]
async fn queued_waits_while_provisioning_and_replaces_after_the_phase_timeout() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Provisioning, TAG)]);
    let mut young = status("queued", "a");
    young.phase_started_at = ago(60);
    let outcome = run(&instance(young), &settings(), &cloud, false)
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Wait(_)), "{outcome:?}");

    let mut old = status("queued", "a");
    old.phase_started_at = ago(1801);
    let t = transition(
        run(&instance(old), &settings(), &cloud, false)
            .await
            .unwrap(),
    );
    assert_eq!(t.status.status, "");
    assert_eq!(t.status.instance_id, "");
    assert_eq!(t.note.unwrap().reason, "ProvisioningTimeout");
    assert_eq!(*cloud.deleted.lock().unwrap(), ["a"]);
}

#[tokio::test]
async fn queued_renders_the_config_and_asks_for_a_reinstall() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, TAG)]);
    let mut inst = instance(status("queued", "a"));
    inst.spec.install_disk = Some("/dev/nvme0n1".into());
    inst.spec.iso_url = Some("http://iso.example/harvester-pool.iso".into());
    let outcome = run(&inst, &settings(), &cloud, false).await.unwrap();
    let Outcome::Reinstall {
        server_id,
        request,
        then,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(server_id, "a");
    assert_eq!(
        request.ipxe_script_url.as_deref(),
        Some("http://ingot.example:8080/ipxe/instances/pool-abcdefgh.ipxe")
    );
    assert_eq!(then.status.status, "reinstalling");
    let updates = cloud.boot_updates.lock().unwrap();
    let userdata = updates[0].1.userdata.clone().unwrap();
    assert!(userdata.contains("K10-join-token"), "the final config");
    assert!(
        userdata.contains("/dev/nvme0n1"),
        "the install disk: {userdata}"
    );
    assert!(
        userdata.contains("http://iso.example/harvester-pool.iso"),
        "the pool's isoUrl: {userdata}"
    );
}

#[tokio::test]
async fn a_recorded_reinstall_intent_is_never_requested_again() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, TAG)]);
    for phase in ["queued", "ready"] {
        let mut s = status(phase, "a");
        s.reinstall_requested_at = ago(5);
        let t = transition(run(&instance(s), &settings(), &cloud, false).await.unwrap());
        assert_eq!(t.status.status, "reinstalling", "{phase}");
        assert_eq!(t.status.reinstall_requested_at, None);
        assert_eq!(t.note.unwrap().reason, "ReinstallAssumed");
    }
    assert!(cloud.boot_updates.lock().unwrap().is_empty());
}

#[tokio::test]
async fn reinstalling_becomes_ready_when_active_and_starts_the_install_clock() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, TAG)]);
    let t = transition(
        run(
            &instance(status("reinstalling", "a")),
            &settings(),
            &cloud,
            false,
        )
        .await
        .unwrap(),
    );
    assert_eq!(t.status.status, "ready");
    assert_eq!(t.status.install_started_at, Some(Time(now())));

    let cloud = FakeCloud::with(vec![server("a", ServerState::Reinstalling, TAG)]);
    let mut stuck = status("reinstalling", "a");
    stuck.phase_started_at = ago(1900);
    let t = transition(
        run(&instance(stuck), &settings(), &cloud, false)
            .await
            .unwrap(),
    );
    assert_eq!(t.note.unwrap().reason, "ReinstallTimeout");
    assert_eq!(t.status.status, "");
}

#[tokio::test]
async fn a_failed_server_is_deleted_and_started_over() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Failed, TAG)]);
    let t = transition(
        run(&instance(status("queued", "a")), &settings(), &cloud, false)
            .await
            .unwrap(),
    );
    assert_eq!(t.note.unwrap().reason, "ProvisioningFailed");
    assert_eq!(t.status.status, "");
    assert_eq!(*cloud.deleted.lock().unwrap(), ["a"]);
}

#[tokio::test]
async fn a_vanished_server_is_noticed_in_every_phase_with_a_server() {
    for phase in ["queued", "reinstalling", "ready"] {
        let cloud = FakeCloud::default();
        let mut s = status(phase, "gone");
        s.install_started_at = ago(1);
        let t = transition(run(&instance(s), &settings(), &cloud, false).await.unwrap());
        assert_eq!(t.status.status, "", "{phase}");
        assert_eq!(t.note.unwrap().reason, "ServerVanished", "{phase}");
    }
}

#[tokio::test]
async fn ready_becomes_managed_when_the_node_joins() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, TAG)]);
    let t = transition(
        run(&instance(status("ready", "a")), &settings(), &cloud, true)
            .await
            .unwrap(),
    );
    assert_eq!(t.status.status, "managed");
    assert!(t.ready.unwrap().ok);
}

#[tokio::test]
async fn install_retries_back_off_then_the_server_is_replaced() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, TAG)]);
    // Within the retry period: wait.
    let mut s = status("ready", "a");
    s.install_started_at = ago(599);
    let outcome = run(&instance(s), &settings(), &cloud, false).await.unwrap();
    assert!(matches!(outcome, Outcome::Wait(_)), "{outcome:?}");

    // Past it: the install is started again, with InstallRetried, counted.
    let mut s = status("ready", "a");
    s.install_started_at = ago(601);
    let outcome = run(&instance(s), &settings(), &cloud, false).await.unwrap();
    let Outcome::Reinstall { then, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(then.status.install_retries, Some(1));
    // The retry is counted in the intent written before the call: a crash right after the
    // call cannot lose it (retries stay capped).
    let intent = phase::reinstall_intent(&status("ready", "a"), &then.status, now());
    assert_eq!(intent.install_retries, Some(1));
    assert!(intent.reinstall_requested_at.is_some());
    assert_eq!(then.note.unwrap().reason, "InstallRetried");
    assert_eq!(cloud.boot_updates.lock().unwrap().len(), 1, "re-rendered");

    // After one retry the wait doubles.
    let mut s = status("ready", "a");
    s.install_retries = Some(1);
    s.install_started_at = ago(1100);
    let outcome = run(&instance(s), &settings(), &cloud, false).await.unwrap();
    assert!(matches!(outcome, Outcome::Wait(_)), "{outcome:?}");

    // Out of retries: the server is replaced.
    let mut s = status("ready", "a");
    s.install_retries = Some(2);
    s.install_started_at = ago(5000);
    let t = transition(run(&instance(s), &settings(), &cloud, false).await.unwrap());
    assert_eq!(t.note.unwrap().reason, "InstallFailed");
    assert_eq!(t.status.status, "");
    assert_eq!(t.status.install_retries, None);
    assert_eq!(*cloud.deleted.lock().unwrap(), ["a"]);
}

#[tokio::test]
async fn managed_scrubs_the_userdata_once() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, TAG)]);
    let t = transition(
        run(
            &instance(status("managed", "a")),
            &settings(),
            &cloud,
            false,
        )
        .await
        .unwrap(),
    );
    assert_eq!(t.status.userdata_scrubbed, Some(true));
    let updates = cloud.boot_updates.lock().unwrap().clone();
    assert_eq!(updates[0].1.userdata.as_deref(), Some(SCRUBBED_USERDATA));
    assert!(!SCRUBBED_USERDATA.contains("token:"));

    let mut done = status("managed", "a");
    done.userdata_scrubbed = Some(true);
    let outcome = run(&instance(done), &settings(), &cloud, false)
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Wait(_)));
    assert_eq!(cloud.boot_updates.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn provider_refusals_come_back_as_errors_for_the_condition() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Failed, TAG)]);
    *cloud.fail.lock().unwrap() = Some("forbidden");
    let error = run(&instance(status("queued", "a")), &settings(), &cloud, false)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Forbidden { .. }));
    assert!(!error.is_transient());
    *cloud.fail.lock().unwrap() = Some("transient");
    let error = run(&instance(status("", "")), &settings(), &cloud, false)
        .await
        .unwrap_err();
    assert!(error.is_transient());
}

#[tokio::test]
async fn no_install_script_url_blocks_with_the_fix() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, TAG)]);
    let settings = Settings {
        ipxe_base_url: None,
        ..settings()
    };
    let outcome = run(&instance(status("queued", "a")), &settings, &cloud, false)
        .await
        .unwrap();
    let Outcome::Blocked(Blocked {
        reason, message, ..
    }) = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(reason, "NoIpxeUrl");
    assert!(message.contains("--ipxe-base-url") && message.contains("ipxeScriptUrl"));
}

#[tokio::test]
async fn the_pool_install_script_is_used_for_the_reinstall() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, TAG)]);
    let mut inst = instance(status("queued", "a"));
    inst.metadata.annotations = Some(BTreeMap::from([(
        super::super::ipxe::RECONFIG_ANNOTATION.to_owned(),
        "http://pxe.example/install.ipxe".to_owned(),
    )]));
    let Outcome::Reinstall { request, .. } = run(&inst, &settings(), &cloud, false).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(
        request.ipxe_script_url.as_deref(),
        Some("http://pxe.example/install.ipxe")
    );
}

fn single_boot(status: InstanceStatus) -> Instance {
    let mut inst = instance(status);
    inst.spec.single_boot = Some(true);
    inst
}

#[tokio::test]
async fn single_boot_creates_the_server_with_the_install_script_and_config() {
    let cloud = FakeCloud::default();
    let outcome = run(&single_boot(status("", "")), &settings(), &cloud, false)
        .await
        .unwrap();
    let Outcome::Create { request } = outcome else {
        panic!("{outcome:?}")
    };
    let ingot_metal::Boot::Ipxe { script_url, .. } = &request.boot else {
        panic!("{:?}", request.boot)
    };
    assert_eq!(
        script_url.as_deref(),
        Some("http://ingot.example:8080/ipxe/instances/pool-abcdefgh.ipxe"),
        "the first boot runs the installer"
    );
    let userdata = request.userdata.unwrap();
    assert!(userdata.contains("K10-join-token"), "the install config");
}

#[tokio::test]
async fn single_boot_goes_from_queued_to_ready_without_a_reinstall() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, TAG)]);
    let t = transition(
        run(
            &single_boot(status("queued", "a")),
            &settings(),
            &cloud,
            false,
        )
        .await
        .unwrap(),
    );
    assert_eq!(t.status.status, "ready");
    assert_eq!(t.status.install_started_at, Some(Time(now())));
    assert!(cloud.boot_updates.lock().unwrap().is_empty());
}

#[tokio::test]
async fn single_boot_retries_the_install_with_the_script() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, TAG)]);
    let mut s = status("ready", "a");
    s.install_started_at = ago(601);
    let outcome = run(&single_boot(s), &settings(), &cloud, false)
        .await
        .unwrap();
    let Outcome::Reinstall { request, then, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(request.ipxe_script_url.is_some());
    assert_eq!(then.status.status, "reinstalling");
    assert_eq!(then.status.install_retries, Some(1));
    assert_eq!(then.note.unwrap().reason, "InstallRetried");
}

#[tokio::test]
async fn a_server_that_fails_its_reinstall_is_replaced() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Failed, TAG)]);
    let t = transition(
        run(
            &instance(status("reinstalling", "a")),
            &settings(),
            &cloud,
            false,
        )
        .await
        .unwrap(),
    );
    assert_eq!(t.status.status, "");
    assert_eq!(t.note.unwrap().reason, "ProvisioningFailed");
    assert_eq!(*cloud.deleted.lock().unwrap(), ["a"]);
}

#[tokio::test]
async fn a_server_in_an_unexpected_state_blocks_with_its_state() {
    let cloud = FakeCloud::with(vec![server("a", ServerState::Off, TAG)]);
    let outcome = run(&instance(status("queued", "a")), &settings(), &cloud, false)
        .await
        .unwrap();
    let Outcome::Blocked(Blocked { reason, .. }) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(reason, "UnexpectedServerState");
}

/// A server found by the id in `status.instanceID` is reinstalled or deleted only if it is the
/// Instance's: its tag, or (the Go addon's, which tagged nothing) its hostname.
#[tokio::test]
async fn a_server_in_the_status_that_is_not_the_instance_s_is_left_alone() {
    let settings = settings();
    for foreign in [
        server("a", ServerState::Active, "ingot-instance:someone-else"),
        Server {
            hostname: "someone-elses".to_owned(),
            ..server("a", ServerState::Active, "harvester")
        },
    ] {
        let cloud = FakeCloud::with(vec![foreign]);
        for phase in ["queued", "reinstalling", "ready"] {
            let instance = instance(InstanceStatus {
                install_started_at: ago(7200),
                ..status(phase, "a")
            });
            let outcome = run(&instance, &settings, &cloud, false).await.unwrap();
            assert!(
                matches!(
                    outcome,
                    Outcome::Blocked(Blocked {
                        reason: "ServerNotOwned",
                        ..
                    })
                ),
                "{phase}: {outcome:?}"
            );
        }
        assert!(cloud.deleted.lock().unwrap().is_empty());
        assert!(cloud.boot_updates.lock().unwrap().is_empty());
    }
    // The Go addon's server: no tag, the Instance's hostname.
    let cloud = FakeCloud::with(vec![server("a", ServerState::Active, "harvester")]);
    let instance = instance(status("reinstalling", "a"));
    assert!(matches!(
        run(&instance, &settings, &cloud, false).await.unwrap(),
        Outcome::Transition(_)
    ));
}

fn on_premises(namespace: &str, address_pool: Option<&str>) -> Instance {
    let mut instance = Instance::new(
        "rack-a-abcdefgh",
        InstanceSpec {
            inventory_selector: Some(Default::default()),
            inventory_namespace: Some(namespace.to_owned()),
            address_pool: address_pool.map(str::to_owned),
            ..InstanceSpec::default()
        },
    );
    instance.metadata.uid = Some("uid-1".into());
    instance
}

/// The operator's allowed namespaces bound which Inventories a pool may draw from, and the
/// AddressPool is needed; both are refused before anything is read.
#[tokio::test]
async fn an_inventory_pool_is_held_to_the_allowed_namespaces() {
    let client =
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let settings = Settings {
        inventory_namespaces: vec!["metal".into(), "lab".into()],
        ..Settings::default()
    };
    let Err(refused) =
        super::inventory_cloud(&client, &settings, &on_premises("tenant-b", Some("nodes")))
    else {
        panic!("a namespace outside --pool-inventory-namespaces was allowed");
    };
    assert_eq!(refused.reason, "InventoryNamespaceNotAllowed");
    assert!(
        refused.message.contains("\"tenant-b\"")
            && refused.message.contains("metal, lab")
            && refused.message.contains("--pool-inventory-namespaces"),
        "{}",
        refused.message
    );
    let Err(refused) = super::inventory_cloud(&client, &settings, &on_premises("metal", None))
    else {
        panic!("no AddressPool was accepted");
    };
    assert_eq!(refused.reason, "NoAddressPool");
    assert!(
        super::inventory_cloud(&client, &settings, &on_premises("metal", Some("nodes"))).is_ok()
    );
    // No list: any namespace.
    assert!(
        super::inventory_cloud(
            &client,
            &Settings::default(),
            &on_premises("tenant-b", Some("nodes"))
        )
        .is_ok()
    );
}

/// On premises the first boot installs, whatever singleBoot says, and it carries the install
/// request (no plan or metro).
#[test]
fn an_inventory_instance_installs_at_its_first_boot() {
    let instance = on_premises("metal", Some("nodes"));
    assert!(phase::on_premises(&instance));
    assert!(phase::single_boot(&instance));
    let mut equinix = instance.clone();
    equinix.spec.inventory_selector = None;
    assert!(!phase::single_boot(&equinix));
}

/// On premises the pool's interfaceConfiguration is the management network's VLAN, written
/// into the install request; anything else is refused naming the field, and nothing is created.
#[tokio::test]
async fn an_inventory_instance_carries_its_management_vlan_into_the_install() {
    use ingot_api::equinix::{InterfaceConfiguration, NetworkingConfiguration};
    let cloud = FakeCloud::with(vec![]);
    let with = |name: &str, vlans: &[&str]| {
        let mut instance = on_premises("metal", Some("nodes"));
        instance.spec.networking_configuration = Some(NetworkingConfiguration {
            type_: None,
            interface_configuration: Some(vec![InterfaceConfiguration {
                name: Some(name.into()),
                vlan_ids: Some(vlans.iter().map(|v| (*v).to_owned()).collect()),
            }]),
        });
        instance
    };
    let install = |outcome: Outcome| -> serde_json::Value {
        let Outcome::Create { request } = outcome else {
            panic!("{outcome:?}")
        };
        serde_json::from_str(request.userdata.as_deref().unwrap()).unwrap()
    };
    let tagged = install(
        run(&with("bond0", &["100"]), &settings(), &cloud, false)
            .await
            .unwrap(),
    );
    assert_eq!(tagged["vlanId"], 100, "{tagged}");
    let untagged = install(
        run(
            &on_premises("metal", Some("nodes")),
            &settings(),
            &cloud,
            false,
        )
        .await
        .unwrap(),
    );
    assert!(untagged.get("vlanId").is_none(), "{untagged}");
    for (instance, said) in [
        (with("eth1", &["100"]), "names \"eth1\""),
        (with("eth0", &["100", "200"]), "has 2 VLANs"),
        (
            with("eth0", &["8b1c3f52-0d8e-4a8c-9a57-6f1f3c7b2a10"]),
            "not a number from 1 to 4094",
        ),
    ] {
        let Outcome::Blocked(Blocked {
            reason, message, ..
        }) = run(&instance, &settings(), &cloud, false).await.unwrap()
        else {
            panic!("{said}: not refused")
        };
        assert_eq!(reason, "InvalidNetworking");
        assert!(
            message.contains("spec.networkingConfiguration.interfaceConfiguration")
                && message.contains(said),
            "{message}"
        );
    }
}

/// An Inventory that turns up free and ready wakes the Instances of its namespace that found
/// none to take, and no others.
#[test]
fn a_free_ready_inventory_wakes_the_instances_waiting_for_one_in_its_namespace() {
    use ingot_api::seeder::Inventory;
    use std::sync::Arc;
    let waiting = |name: &str, namespace: &str, reason: &str| {
        let mut i = on_premises(namespace, Some("nodes"));
        i.metadata.name = Some(name.to_owned());
        i.status = Some(InstanceStatus {
            conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: reason.into(),
                message: String::new(),
                last_transition_time: Time(Timestamp::now()),
                observed_generation: None,
            }],
            ..InstanceStatus::default()
        });
        Arc::new(i)
    };
    let instances = vec![
        waiting("a-none-free", "metal", "NoneFree"),
        waiting("b-not-ready", "metal", "NotReady"),
        waiting("c-elsewhere", "lab", "NoneFree"),
        waiting("d-refused", "metal", "NoAddressPool"),
    ];
    let inventory = |status: &str, annotations: serde_json::Value| -> Inventory {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "node3", "namespace": "metal", "annotations": annotations},
            "spec": {"primaryDisk": "/dev/sda",
                "baseboardSpec": {"connection": {"host": "10.0.0.9", "port": 623, "insecureTLS": true,
                    "authSecretRef": {"name": "s", "namespace": "metal"}}}},
            "status": {"status": status}
        }))
        .unwrap()
    };
    let woken: Vec<String> = super::waiting_for(
        &instances,
        &inventory("inventoryNodeReady", serde_json::json!({})),
    )
    .into_iter()
    .map(|r| r.name)
    .collect();
    assert_eq!(woken, ["a-none-free", "b-not-ready"]);
    // Not ready yet, or claimed: nobody is woken.
    assert!(super::waiting_for(&instances, &inventory("", serde_json::json!({}))).is_empty());
    let claimed = inventory(
        "inventoryNodeReady",
        serde_json::json!({"onprem.ingot.dev/owner": "x", "onprem.ingot.dev/hostname": "y"}),
    );
    assert!(super::waiting_for(&instances, &claimed).is_empty());
}

/// An Inventory whose wipe reported wakes the Instance releasing it (its claim's hostname),
/// and only then.
#[test]
fn a_reported_wipe_wakes_the_instance_releasing_its_server() {
    use ingot_api::seeder::Inventory;
    let inventory = |annotations: serde_json::Value| -> Inventory {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
            "metadata": {"name": "node1", "namespace": "metal", "annotations": annotations},
            "spec": {"baseboardSpec": {"connection": {"host": "10.0.0.9", "port": 623,
                "insecureTLS": true, "authSecretRef": {"name": "s", "namespace": "site"}}}}
        }))
        .unwrap()
    };
    let claim = serde_json::json!({"onprem.ingot.dev/owner": "pool-a",
        "onprem.ingot.dev/hostname": "pool-a-xk2pqrst",
        "onprem.ingot.dev/wipe-job": "node1-wipe-bcdfg"});
    let mut reported = claim.clone();
    reported["onprem.ingot.dev/wiped"] = "node1-wipe-bcdfg".into();
    assert_eq!(
        super::wiped_for(&inventory(reported)).map(|r| r.name),
        Some("pool-a-xk2pqrst".to_owned())
    );
    assert!(super::wiped_for(&inventory(claim)).is_none());
    assert!(super::wiped_for(&inventory(serde_json::json!({}))).is_none());
}
