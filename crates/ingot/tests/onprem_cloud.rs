//! `onprem::cloud::InventoryCloud` (a `BareMetalCloud` over Inventories) on the real API server,
//! each Inventory's BMC a sushy-tools emulator over TLS, with `ingot run --controllers
//! provisioning` carrying out the BMC Jobs (Rufio) and keeping the Inventories ready and the
//! AddressPool accepted (Seeder, AddressPool controllers). What the tests assert is read from
//! the peers: boot overrides, power states and requests at sushy, claims and allocations at the
//! API server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ingot_api::rufio::Job;
use ingot_api::seeder::{AddressPool, INVENTORY_NODE_READY, Inventory};
use ingot_controllers::onprem::claims::{
    self, CLAIMED_LABEL, HOSTNAME_ANNOTATION, OWNER_ANNOTATION,
};
use ingot_controllers::onprem::cloud::{
    ADDRESS_ANNOTATION, BOOT_JOB_ANNOTATION, BOOTS_ANNOTATION, CLAIM_JOB_LABEL, InventoryCloud,
    Settings,
};
use ingot_controllers::onprem::image::{Image, ImageRequest};
use ingot_controllers::onprem::wipe::{WipeImage, WipePolicy};
use ingot_controllers::provisioning::addresses::PoolRef;
use ingot_controllers::provisioning::boot::BOOT_FROM_DISK;
use ingot_controllers::provisioning::node::phase::BootMedia;
use ingot_metal::{BareMetalCloud, Boot, CreateServer, Error, NetworkMode, ServerState, Shortage};
use ingot_testenv::harness::closed_port;
use ingot_testenv::harness::operator::Operator;
use ingot_testenv::harness::peers::{Sushy, start_sushy_tls};
use ingot_testenv::wait_for;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

const USER: &str = "admin";
const PASSWORD: &str = "sushy-password";
const OWNER: &str = "pool-a";
const WAIT: Duration = Duration::from_secs(120);

fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// The requests of this method on the System that sushy logged (Werkzeug's access log).
fn requests(sushy: &Sushy, needle: &str) -> usize {
    std::fs::read_to_string(sushy.dir.join("sushy.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

fn boot_patches(sushy: &Sushy) -> usize {
    requests(sushy, "\"PATCH /redfish/v1/Systems/")
}

async fn system(sushy: &Sushy) -> Value {
    wait_for("sushy's system", Duration::from_secs(30), || async {
        sushy.system(USER, PASSWORD).await
    })
    .await
}

async fn inventory(client: &Client, ns: &str, name: &str) -> Inventory {
    Api::<Inventory>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
}

async fn allocations(client: &Client, ns: &str) -> Vec<(String, String)> {
    let pool = Api::<AddressPool>::namespaced(client.clone(), ns)
        .get("nodes")
        .await
        .unwrap();
    pool.status
        .map(|s| {
            s.address_allocation
                .into_iter()
                .map(|(address, owner)| (address, owner.name))
                .collect()
        })
        .unwrap_or_default()
}

async fn claim_jobs(client: &Client, ns: &str) -> Vec<Job> {
    Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(CLAIM_JOB_LABEL))
        .await
        .unwrap()
        .items
}

fn settings(ns: &str, labels: Value) -> Settings {
    Settings {
        namespaces: vec![ns.to_owned()],
        selector: object(json!({"matchLabels": labels})),
        address_pool: PoolRef {
            namespace: ns.to_owned(),
            name: "nodes".to_owned(),
        },
        off_wait: Duration::from_secs(90),
        poll: Duration::from_millis(250),
        owner: Some(OWNER.to_owned()),
        boot_url: None,
        boot_media: BootMedia::Pxe,
        wipe: WipePolicy::None,
        wipe_image: None,
        minimum: Default::default(),
        crash_point: None,
    }
}

fn cloud(client: &Client, ns: &str, labels: Value) -> InventoryCloud {
    InventoryCloud::new(client.clone(), settings(ns, labels)).unwrap()
}

fn request(hostname: &str) -> CreateServer {
    CreateServer::new(
        hostname,
        "ignored-plan",
        "ignored-metro",
        OWNER,
        Boot::Ipxe {
            script_url: Some(format!("http://127.0.0.1:9/ipxe/{hostname}.ipxe")),
            always: false,
        },
    )
}

struct Site {
    client: Client,
    ns: String,
    /// The BMCs of `server-0` and `server-1` (rack `a`).
    sushy: Vec<Sushy>,
    operator: Operator,
    /// The port of the operator's boot server.
    boot_port: u16,
}

impl Site {
    async fn start() -> Self {
        Self::start_with(None).await
    }

    /// With `media` (`--boot-media-dir`), the boot server also serves boot CDs. Its
    /// `--boot-url` is its own address, and it lets 127.0.0.1 (the test) report installs and
    /// wipes.
    async fn start_with(media: Option<&Path>) -> Self {
        let env = ingot_testenv::shared().await;
        let client = env.client().unwrap();
        let ns = env.namespace("onprem-cloud").await.unwrap();
        let sushy: Vec<Sushy> = (0..2).map(|_| start_sushy_tls(USER, PASSWORD)).collect();
        for s in &sushy {
            system(s).await;
        }
        let secret: Secret = object(json!({"metadata": {"name": "bmc"},
            "stringData": {"username": USER, "password": PASSWORD}}));
        Api::<Secret>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let pool: AddressPool = object(json!({
            "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "AddressPool",
            "metadata": {"name": "nodes"},
            "spec": {"cidr": "10.31.0.0/29", "gateway": "10.31.0.1"}
        }));
        Api::<AddressPool>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &pool)
            .await
            .unwrap();
        // Two servers in rack a behind sushy; one in rack c whose BMC never answers.
        let hosts = [
            (
                "server-0",
                "a",
                format!("https://127.0.0.1:{}", sushy[0].port),
                "52:54:00:00:00:10",
            ),
            (
                "server-1",
                "a",
                format!("https://127.0.0.1:{}", sushy[1].port),
                "52:54:00:00:00:11",
            ),
            (
                "server-2",
                "c",
                format!("https://127.0.0.1:{}", closed_port()),
                "52:54:00:00:00:12",
            ),
        ];
        for (name, rack, host, mac) in hosts {
            let inventory: Inventory = object(json!({
                "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
                "metadata": {"name": name, "labels": {"rack": rack}},
                "spec": {"primaryDisk": "/dev/sda", "managementInterfaceMacAddress": mac,
                    "baseboardSpec": {"connection": {"host": host, "port": 623, "insecureTLS": true,
                        "authSecretRef": {"name": "bmc", "namespace": ns}}}}
            }));
            Api::<Inventory>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &inventory)
                .await
                .unwrap();
        }
        let boot_port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let operator = Operator::builder(env!("CARGO_BIN_EXE_ingot"))
            .tag("onprem-cloud")
            .kubeconfig(Path::new(env.kubeconfig_path()))
            .arg(format!("--lease-namespace={ns}"))
            .arg(format!("--lease-name=ingot-{ns}"))
            .arg("--lease-duration-seconds=3")
            .controllers("provisioning")
            .arg(format!("--provisioning-namespace={ns}"))
            .arg(format!("--seeder-namespace={ns}"))
            .arg(format!("--rufio-namespace={ns}"))
            .arg("--rufio-machine-interval-seconds=1")
            .arg("--rufio-task-poll-seconds=0.3")
            .arg(format!("--boot-addr=127.0.0.1:{boot_port}"))
            .arg(format!("--boot-url=http://127.0.0.1:{boot_port}"))
            .arg("--boot-allow-source=127.0.0.1/32")
            .env("RUST_LOG", "info,ingot_controllers=debug");
        let operator = match media {
            Some(dir) => operator.arg(format!("--boot-media-dir={}", dir.display())),
            None => operator,
        }
        .start();
        let site = Site {
            client,
            ns,
            sushy,
            operator,
            boot_port,
        };
        for name in ["server-0", "server-1"] {
            wait_for(&format!("{name} ready"), WAIT, || async {
                let i = inventory(&site.client, &site.ns, name).await;
                (i.status.and_then(|s| s.status).as_deref() == Some(INVENTORY_NODE_READY))
                    .then_some(())
            })
            .await;
        }
        site
    }

    /// Waits until the boot server answers a network boot from `mac` with `expected`.
    async fn boots(&self, mac: &str, expected: &str) {
        let url = format!("http://127.0.0.1:{}/boot/{mac}", self.boot_port);
        wait_for(&format!("{mac} answered {expected:?}"), WAIT, || async {
            let body = reqwest::get(&url).await.ok()?.text().await.ok()?;
            (body == expected).then_some(())
        })
        .await;
    }

    /// The sushy of a server (`<ns>/server-<i>`).
    /// The operator's boot server, as its `--boot-url` names it.
    fn boot_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.boot_port)
    }

    /// [`settings`] for the Inventories with these labels, with the operator's boot URL.
    fn booting(&self, labels: Value) -> Settings {
        Settings {
            boot_url: Some(url::Url::parse(&self.boot_url()).unwrap()),
            ..settings(&self.ns, labels)
        }
    }

    fn bmc(&self, id: &str) -> &Sushy {
        let index: usize = id.rsplit('-').next().unwrap().parse().unwrap();
        &self.sushy[index]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_are_claimed_booted_once_and_released_confirmed_off() {
    let site = Site::start().await;
    let (client, ns) = (&site.client, site.ns.as_str());
    let rack_a = Arc::new(cloud(client, ns, json!({"rack": "a"})));

    // Why nothing can be taken, typed: nothing matches; matches but not ready.
    let none = cloud(client, ns, json!({"rack": "z"}))
        .create_server(&request("h0"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            none,
            Error::NoServer {
                why: Shortage::NoneMatching,
                ..
            }
        ),
        "{none}"
    );
    assert!(none.to_string().contains("rack=z"), "{none}");
    let unready = cloud(client, ns, json!({"rack": "c"}))
        .create_server(&request("h0"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            unready,
            Error::NoServer {
                why: Shortage::NotReady,
                ..
            }
        ),
        "{unready}"
    );
    assert!(unready.to_string().contains("server-2"), "{unready}");

    // A selector the API server would refuse is refused when the cloud is made, naming it.
    let bad = InventoryCloud::new(
        client.clone(),
        Settings {
            selector: object(json!({"matchExpressions": [
                {"key": "rack", "operator": "Sideways", "values": ["a"]}]})),
            ..settings(ns, json!({}))
        },
    )
    .err()
    .expect("an invalid selector was accepted");
    assert!(
        matches!(bad, Error::InvalidRequest(_)) && bad.to_string().contains("Sideways"),
        "{bad}"
    );

    // Only the allowed namespaces are looked in: rack a elsewhere is nothing, and an id
    // outside them is refused, naming the namespace.
    let elsewhere = InventoryCloud::new(
        client.clone(),
        Settings {
            namespaces: vec!["default".to_owned()],
            ..settings(ns, json!({"rack": "a"}))
        },
    )
    .unwrap();
    let nothing = elsewhere.create_server(&request("h0")).await.unwrap_err();
    assert!(
        matches!(
            nothing,
            Error::NoServer {
                why: Shortage::NoneMatching,
                ..
            }
        ),
        "{nothing}"
    );
    let outside = elsewhere
        .get_server(&format!("{ns}/server-0"))
        .await
        .unwrap_err();
    assert!(
        matches!(outside, Error::InvalidRequest(_)) && outside.to_string().contains(ns),
        "{outside}"
    );

    // Before any claim the boot server sends the servers to their disks.
    site.boots("52:54:00:00:00:10", BOOT_FROM_DISK).await;

    // Two creates at once over the two servers: one each.
    let patches_before: Vec<usize> = site.sushy.iter().map(boot_patches).collect();
    let (r1, r2) = (request("h1"), request("h2"));
    let (a, b) = tokio::join!(rack_a.create_server(&r1), rack_a.create_server(&r2));
    let (h1, h2) = (a.unwrap(), b.unwrap());
    assert_ne!(h1.id, h2.id, "two hostnames, one server");
    for server in [&h1, &h2] {
        assert!(server.provider_id.starts_with("inventory://"), "{server:?}");
        assert_eq!(server.provider_id, format!("inventory://{}", server.id));
        assert_eq!(server.tags, [OWNER]);
        assert_eq!(server.addresses.len(), 1, "{server:?}");
        let name = server.id.split_once('/').unwrap().1;
        let i = inventory(client, ns, name).await;
        assert_eq!(i.annotations()[OWNER_ANNOTATION], OWNER);
        assert_eq!(i.annotations()[HOSTNAME_ANNOTATION], server.hostname);
        assert_eq!(i.labels()[CLAIMED_LABEL], "true");
        assert_eq!(
            Some(server.macs()),
            i.spec.management_interface_mac_address.map(|m| vec![m])
        );
        assert!(
            allocations(client, ns)
                .await
                .contains(&(server.addresses[0].address.clone(), name.to_owned())),
            "{:?}",
            allocations(client, ns).await
        );
    }
    // The boot reached each BMC: PXE once, and the server on again, read back from sushy.
    for server in [&h1, &h2] {
        let bmc = site.bmc(&server.id);
        let s = wait_for(&format!("{} booted", server.id), WAIT, || async {
            let s = system(bmc).await;
            let booted = s["Boot"]["BootSourceOverrideTarget"] == "Pxe"
                && s["PowerState"] == "On"
                && rack_a.get_server(&server.id).await.unwrap().state == ServerState::Active;
            booted.then_some(s)
        })
        .await;
        // sushy's fake driver keeps the target and always reports `Continuous`: the override
        // sent (`Once`, in the mode the server is in) is checked in crates/bmc/tests/redfish_emulator.rs.
        assert_eq!(s["Boot"]["BootSourceOverrideTarget"], "Pxe", "{s}");
        assert!(
            requests(bmc, "ComputerSystem.Reset") >= 2,
            "off then on: {}",
            site.operator.log_tail()
        );
    }
    let patches_booted: Vec<usize> = site.sushy.iter().map(boot_patches).collect();
    for (before, after) in patches_before.iter().zip(&patches_booted) {
        assert_eq!(after - before, 1, "one boot override per server");
    }
    // Their network boots are chained to the install script each claim recorded.
    for (server, hostname) in [(&h1, "h1"), (&h2, "h2")] {
        let chain = format!(
            "#!ipxe\n# claimed: the install boot its claim recorded\nchain --autofree http://127.0.0.1:9/ipxe/{hostname}.ipxe\n"
        );
        site.boots(&server.macs()[0], &chain).await;
    }

    // None left for a third hostname.
    let full = rack_a.create_server(&request("h3")).await.unwrap_err();
    assert!(
        matches!(
            full,
            Error::NoServer {
                why: Shortage::NoneFree,
                ..
            }
        ),
        "{full}"
    );

    // The same owner and hostname again (a restart, a lost answer): the same server, no second
    // boot sent.
    let again = rack_a.create_server(&request("h1")).await.unwrap();
    assert_eq!(again.id, h1.id);
    assert_eq!(again.addresses, h1.addresses);
    // Every Job sent under a claim has run (one the adopt had sent would show at sushy).
    wait_for("every claim's Job to end", WAIT, || async {
        all_completed(&claim_jobs(client, ns).await).then_some(())
    })
    .await;
    let patches_adopted: Vec<usize> = site.sushy.iter().map(boot_patches).collect();
    assert_eq!(
        patches_adopted, patches_booted,
        "an adopted claim was booted again"
    );
    let h1_name = h1.id.split_once('/').unwrap().1;
    assert_eq!(
        inventory(client, ns, h1_name).await.annotations()[BOOTS_ANNOTATION],
        "1"
    );
    // A create that stopped after sending its boot and before recording it (the records
    // removed by hand): the next create sends the Job of the same name, which is already
    // there, and records it; the BMC sees nothing more.
    Api::<Inventory>::namespaced(client.clone(), ns)
        .patch(
            h1_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                BOOTS_ANNOTATION: null, BOOT_JOB_ANNOTATION: null}}})),
        )
        .await
        .unwrap();
    let resumed = rack_a.create_server(&request("h1")).await.unwrap();
    assert_eq!(resumed.id, h1.id);
    wait_for("every claim's Job to end", WAIT, || async {
        all_completed(&claim_jobs(client, ns).await).then_some(())
    })
    .await;
    assert_eq!(
        site.sushy.iter().map(boot_patches).collect::<Vec<_>>(),
        patches_booted,
        "a boot sent but not recorded was sent again"
    );
    assert_eq!(
        inventory(client, ns, h1_name).await.annotations()[BOOTS_ANNOTATION],
        "1"
    );
    let found = rack_a.find_server(OWNER, "h1").await.unwrap().unwrap();
    assert_eq!(found.id, h1.id);
    let listed = rack_a.list_servers(OWNER).await.unwrap();
    assert_eq!(listed.len(), 2);

    // A cloud acting for another owner (another pool) cannot see, power, reinstall or delete
    // pool-a's servers, even by id, nor create under pool-a's tag.
    let stranger = InventoryCloud::new(
        client.clone(),
        Settings {
            owner: Some("pool-b".to_owned()),
            ..settings(ns, json!({"rack": "a"}))
        },
    )
    .unwrap();
    let bmc2 = site.bmc(&h2.id);
    let resets_before = requests(bmc2, "ComputerSystem.Reset");
    let patches_before_stranger = boot_patches(bmc2);
    for refused in [
        stranger.get_server(&h2.id).await.map(drop).unwrap_err(),
        stranger
            .power(&h2.id, ingot_metal::PowerAction::Off)
            .await
            .unwrap_err(),
        stranger
            .reinstall(&h2.id, &Default::default())
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(refused, Error::NotFound { .. }), "{refused}");
    }
    stranger.delete_server(&h2.id).await.unwrap();
    for refused in [
        stranger
            .create_server(&request("h1"))
            .await
            .map(drop)
            .unwrap_err(),
        stranger
            .find_server(OWNER, "h1")
            .await
            .map(drop)
            .unwrap_err(),
        stranger.list_servers(OWNER).await.map(drop).unwrap_err(),
    ] {
        assert!(
            matches!(refused, Error::InvalidRequest(_)) && refused.to_string().contains("pool-b"),
            "{refused}"
        );
    }
    assert!(stranger.list_servers("pool-b").await.unwrap().is_empty());
    let h2_name = h2.id.split_once('/').unwrap().1;
    assert_eq!(
        claims::claim_of(&inventory(client, ns, h2_name).await).map(|c| c.owner),
        Some(OWNER.to_owned()),
        "another owner's delete released the claim"
    );
    assert!(
        claim_jobs(client, ns)
            .await
            .iter()
            .all(|j| !j.name_any().contains("release") && !j.name_any().contains("power")),
        "another owner's call sent a Job"
    );
    assert_eq!(requests(bmc2, "ComputerSystem.Reset"), resets_before);
    assert_eq!(boot_patches(bmc2), patches_before_stranger);

    // Operations of a cloud's port API are refused, typed.
    let refused = rack_a
        .set_network_mode(&h1.id, NetworkMode::Layer2Bonded)
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::NotOnPremises { .. }), "{refused}");

    // Delete: off, read back, before the claim and the address go.
    let bmc = site.bmc(&h1.id);
    rack_a.delete_server(&h1.id).await.unwrap();
    let released = inventory(client, ns, h1_name).await;
    assert_eq!(
        system(bmc).await["PowerState"],
        "Off",
        "released before the power off was read back"
    );
    assert!(
        claims::claim_of(&released).is_none(),
        "{:?}",
        released.annotations()
    );
    assert!(!released.labels().contains_key(CLAIMED_LABEL));
    assert!(!released.annotations().contains_key(ADDRESS_ANNOTATION));
    assert!(
        !allocations(client, ns)
            .await
            .iter()
            .any(|(_, owner)| owner == h1_name),
        "the address of {h1_name} is still held"
    );
    let jobs = claim_jobs(client, ns).await;
    assert!(
        jobs.iter().all(|j| !j.name_any().starts_with(h1_name)),
        "{:?}",
        jobs.iter().map(|j| j.name_any()).collect::<Vec<_>>()
    );
    // Released: its network boot goes to its disk again.
    site.boots(&h1.macs()[0], BOOT_FROM_DISK).await;
    // Deleted again: already released, a success.
    rack_a.delete_server(&h1.id).await.unwrap();
    assert!(matches!(
        rack_a.get_server(&h1.id).await.unwrap_err(),
        Error::NotFound { .. }
    ));

    // Back in the free set: the third hostname takes it, and it is booted for it.
    let h3 = rack_a.create_server(&request("h3")).await.unwrap();
    assert_eq!(h3.id, h1.id);
    wait_for("h3 booted", WAIT, || async {
        (boot_patches(bmc) == patches_booted[h1_name_index(h1_name)] + 1).then_some(())
    })
    .await;

    // Reinstall: one more boot, and only one.
    let bmc2 = site.bmc(&h2.id);
    let before = boot_patches(bmc2);
    rack_a.reinstall(&h2.id, &Default::default()).await.unwrap();
    wait_for("h2 booted again", WAIT, || async {
        (boot_patches(bmc2) == before + 1).then_some(())
    })
    .await;
    assert_eq!(
        inventory(client, ns, h2.id.split_once('/').unwrap().1)
            .await
            .annotations()[BOOTS_ANNOTATION],
        "2"
    );

    // Power through the same Jobs: off read back at sushy and as the server's state, then on.
    wait_for("the reinstall's Job to end", WAIT, || async {
        all_completed(&claim_jobs(client, ns).await).then_some(())
    })
    .await;
    rack_a
        .power(&h2.id, ingot_metal::PowerAction::Off)
        .await
        .unwrap();
    wait_for("h2 off", WAIT, || async {
        let off = system(bmc2).await["PowerState"] == "Off"
            && rack_a.get_server(&h2.id).await.unwrap().state == ServerState::Off;
        off.then_some(())
    })
    .await;
    rack_a
        .power(&h2.id, ingot_metal::PowerAction::On)
        .await
        .unwrap();
    wait_for("h2 on", WAIT, || async {
        let on = system(bmc2).await["PowerState"] == "On"
            && rack_a.get_server(&h2.id).await.unwrap().state == ServerState::Active;
        on.then_some(())
    })
    .await;
    site.operator.terminate();
}

fn all_completed(jobs: &[Job]) -> bool {
    jobs.iter().all(|j| {
        j.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Completed" && c.status == "True")
        })
    })
}

fn h1_name_index(name: &str) -> usize {
    name.rsplit('-').next().unwrap().parse().unwrap()
}

/// Sets Inventory `name`'s `provisioning.ingot.dev/boot-media` annotation.
async fn set_boot_media(client: &Client, ns: &str, name: &str, value: &str) {
    Api::<Inventory>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "provisioning.ingot.dev/boot-media": value}}})),
        )
        .await
        .unwrap();
}

/// Waits until the server behind `bmc` has a CD inserted, a CD boot asked for and its power
/// on (and `also` holds); returns the CD as the BMC shows it.
async fn cd_booted<F, Fut>(bmc: &Sushy, name: &str, also: F) -> Value
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_for(
        &format!("{name}'s CD inserted and booted"),
        WAIT,
        || async {
            let cd = bmc.virtual_cd(USER, PASSWORD).await?;
            let s = system(bmc).await;
            let booted = cd["Inserted"] == true
                && s["Boot"]["BootSourceOverrideTarget"] == "Cd"
                && s["PowerState"] == "On"
                && also().await;
            booted.then_some(cd)
        },
    )
    .await
}

/// A pool's install request, as the pools controller writes it.
fn install_request(hostname: &str) -> CreateServer {
    let mut request = request(hostname);
    request.userdata = Some(
        json!({"version": "v1.7.1", "imageUrl": "http://127.0.0.1:9/harvester",
            "vip": "10.31.0.6", "token": "join-token-cd", "osPassword": "os-password-cd"})
        .to_string(),
    );
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_s_server_boots_its_boot_cd_by_virtual_media_and_it_is_ejected_once_installed() {
    let Some(peer) = ingot_testenv::qemu::QemuPeer::installed_or_skip("onprem_cloud") else {
        return;
    };
    let site = Site::start_with(Some(&peer.boot_media_dir())).await;
    let (client, ns) = (&site.client, site.ns.as_str());
    let boot = site.boot_url();
    let rack_a = InventoryCloud::new(
        client.clone(),
        Settings {
            boot_media: BootMedia::Cd,
            ..site.booting(json!({"rack": "a"}))
        },
    )
    .unwrap();

    // The pool chooses the CD: inserted through the BMC (sushy fetches it from the boot
    // server), booted once, the server on.
    let server = rack_a.create_server(&install_request("cd1")).await.unwrap();
    let name = server.id.split_once('/').unwrap().1.to_owned();
    let bmc = site.bmc(&server.id);
    let media_url = format!("{boot}/media/{ns}/{name}.iso");
    let cd = cd_booted(bmc, &name, || async {
        rack_a.get_server(&server.id).await.unwrap().state == ServerState::Active
    })
    .await;
    assert_eq!(cd["Image"], media_url.as_str(), "{cd}");
    // The image the BMC took is ingot's CD for this server: ISO 9660, with its address.
    let iso = reqwest::get(&media_url).await.unwrap();
    assert_eq!(iso.status(), 200);
    let iso = iso.bytes().await.unwrap();
    assert_eq!(&iso[0x8001..0x8006], b"CD001");
    let address = server.addresses[0].address.clone();
    assert!(
        iso.windows(address.len()).any(|w| w == address.as_bytes()),
        "the CD does not set {address}"
    );
    assert_eq!(
        inventory(client, ns, &name).await.annotations()["onprem.ingot.dev/booted-from"],
        "cd"
    );
    // The CD chains to the boot server, which hands the server its install.
    let script = reqwest::get(format!("{boot}/boot/{}", server.macs()[0]))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(script.contains("harvester.install.config_url"), "{script}");

    // Installed (the installer's webhook): the CD is ejected, once, and no longer served.
    let reported = reqwest::Client::new()
        .put(format!("{boot}/disable/{ns}/{name}"))
        .send()
        .await
        .unwrap();
    assert!(reported.status().is_success(), "{}", reported.status());
    wait_for(&format!("{name}'s CD ejected"), WAIT, || async {
        let cd = bmc.virtual_cd(USER, PASSWORD).await?;
        (cd["Inserted"] == false).then_some(())
    })
    .await;
    let ejects = || async {
        claim_jobs(client, ns)
            .await
            .iter()
            .filter(|j| j.name_any().contains("-eject-"))
            .count()
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(ejects().await, 1, "{}", site.operator.log_tail());
    assert_eq!(
        inventory(client, ns, &name).await.annotations()["onprem.ingot.dev/ejected"],
        "1"
    );
    assert_eq!(
        system(bmc).await["PowerState"],
        "On",
        "the eject touched the power"
    );

    let other = if name == "server-0" {
        "server-1"
    } else {
        "server-0"
    };
    // An annotation naming no boot media: the create is refused naming it, nothing is booted,
    // and the claim is released by the delete.
    set_boot_media(client, ns, other, "usb").await;
    let usb = rack_a
        .create_server(&install_request("usb1"))
        .await
        .unwrap_err();
    assert!(
        matches!(usb, Error::Validation { .. })
            && usb
                .to_string()
                .contains("provisioning.ingot.dev/boot-media")
            && usb.to_string().contains("\"usb\""),
        "{usb}"
    );
    assert!(
        !claim_jobs(client, ns)
            .await
            .iter()
            .any(|j| j.name_any().starts_with(other)),
        "a refused boot sent a Job"
    );
    rack_a
        .delete_server(&format!("{ns}/{other}"))
        .await
        .unwrap();
    assert!(claims::claim_of(&inventory(client, ns, other).await).is_none());
    // An Inventory that says how it boots decides for itself: the other server is annotated
    // for a network boot, and the pool's CD is not inserted in it.
    set_boot_media(client, ns, other, "pxe").await;
    let pxe = rack_a
        .create_server(&install_request("pxe1"))
        .await
        .unwrap();
    assert_eq!(pxe.id, format!("{ns}/{other}"));
    let other_bmc = site.bmc(&pxe.id);
    wait_for(&format!("{other} network-booted"), WAIT, || async {
        let s = system(other_bmc).await;
        (s["Boot"]["BootSourceOverrideTarget"] == "Pxe" && s["PowerState"] == "On").then_some(())
    })
    .await;
    let cd = other_bmc.virtual_cd(USER, PASSWORD).await.unwrap();
    assert_eq!(cd["Inserted"], false, "{cd}");

    // A server whose BMC has no virtual media (IPMI): the CD boot fails before the server is
    // touched, and the server is refused with what to change, not replaced (a replacement
    // would power off every such Inventory in turn).
    let ipmi = ingot_ipmi_sim::serve(ingot_ipmi_sim::FleetConfig::uniform(1, PASSWORD))
        .await
        .unwrap();
    let ipmi_bmc = ipmi.bmcs()[0].clone();
    let no_media: Inventory = object(json!({
        "apiVersion": "metal.harvesterhci.io/v1alpha1", "kind": "Inventory",
        "metadata": {"name": "server-v", "labels": {"rack": "v"}},
        "spec": {"primaryDisk": "/dev/sda", "managementInterfaceMacAddress": ipmi_bmc.mac(0),
            "baseboardSpec": {"connection": {"host": "127.0.0.1", "port": ipmi_bmc.addr().port(),
                "insecureTLS": true, "authSecretRef": {"name": "bmc", "namespace": ns}}}}
    }));
    Api::<Inventory>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &no_media)
        .await
        .unwrap();
    wait_for("server-v ready", WAIT, || async {
        let i = inventory(client, ns, "server-v").await;
        (i.status.and_then(|s| s.status).as_deref() == Some(INVENTORY_NODE_READY)).then_some(())
    })
    .await;
    let rack_v = InventoryCloud::new(
        client.clone(),
        Settings {
            boot_media: BootMedia::Cd,
            ..site.booting(json!({"rack": "v"}))
        },
    )
    .unwrap();
    let controls_before = ipmi_bmc.stats().chassis_controls.len();
    let v = rack_v.create_server(&install_request("v1")).await.unwrap();
    let refused = wait_for("the CD boot refused", WAIT, || async {
        rack_v.get_server(&v.id).await.err()
    })
    .await;
    assert!(
        matches!(refused, Error::Validation { .. })
            && refused.to_string().contains("virtual media")
            && refused.to_string().contains("spec.bootMedia: pxe"),
        "{refused}"
    );
    assert_eq!(
        ipmi_bmc.stats().chassis_controls.len(),
        controls_before,
        "the refused CD boot reached the server's power"
    );
    assert!(claims::claim_of(&inventory(client, ns, "server-v").await).is_some());
    rack_v.delete_server(&v.id).await.unwrap();

    // Released: off read back, and its CD no longer served.
    rack_a.delete_server(&server.id).await.unwrap();
    assert_eq!(system(bmc).await["PowerState"], "Off");
    assert_eq!(reqwest::get(&media_url).await.unwrap().status(), 404);
    rack_a.delete_server(&pxe.id).await.unwrap();
    site.operator.terminate();
}

/// A Gardener machine's create request: an image and its user data, as the Inventory driver
/// writes it.
fn image_request(hostname: &str) -> CreateServer {
    let mut request = request(hostname);
    request.userdata = Some(
        ImageRequest {
            image: Image {
                kernel: "http://127.0.0.1:9/garden/vmlinuz".into(),
                initrd: "http://127.0.0.1:9/garden/initrd".into(),
                cmdline: "console=ttyS0".into(),
            },
            user_data: "#cloud-config\nhostname: m1\n".into(),
        }
        .to_userdata(),
    );
    request
}

/// A machine's image boots as its Inventory says: annotated `cd`, from the boot CD (the cloud's
/// own choice is the network, as for Gardener machines). A live image runs from that CD, so it
/// stays inserted while the claim holds, and comes out with the release's power off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_image_boots_from_the_cd_its_inventory_asks_for_ejected_at_release() {
    let Some(peer) = ingot_testenv::qemu::QemuPeer::installed_or_skip("onprem_cloud") else {
        return;
    };
    let site = Site::start_with(Some(&peer.boot_media_dir())).await;
    let (client, ns) = (&site.client, site.ns.as_str());
    let boot = site.boot_url();
    let machines = InventoryCloud::new(
        client.clone(),
        Settings {
            ..site.booting(json!({"rack": "a"}))
        },
    )
    .unwrap();
    for name in ["server-0", "server-1"] {
        set_boot_media(client, ns, name, "cd").await;
    }

    let server = machines.create_server(&image_request("m1")).await.unwrap();
    let name = server.id.split_once('/').unwrap().1.to_owned();
    let bmc = site.bmc(&server.id);
    let media_url = format!("{boot}/media/{ns}/{name}.iso");
    let cd = cd_booted(bmc, &name, || async { true }).await;
    assert_eq!(cd["Image"], media_url.as_str(), "{cd}");
    let iso = reqwest::get(&media_url).await.unwrap();
    assert_eq!(iso.status(), 200);
    // The CD chains to the boot server, which hands the server the machine's image.
    let script = reqwest::get(format!("{boot}/boot/{}", server.macs()[0]))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        script.contains("http://127.0.0.1:9/garden/vmlinuz") && script.contains("ds=nocloud-net"),
        "{script}"
    );
    // Running: the CD stays in (no install report comes from a live image).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cd = bmc.virtual_cd(USER, PASSWORD).await.unwrap();
    assert_eq!(cd["Inserted"], true, "{cd}");
    assert!(
        !claim_jobs(client, ns)
            .await
            .iter()
            .any(|j| j.name_any().contains("-eject-")),
        "a running machine's CD was ejected"
    );

    // Released: off and ejected at the BMC, then freed; the CD no longer served.
    machines.delete_server(&server.id).await.unwrap();
    assert_eq!(system(bmc).await["PowerState"], "Off");
    let cd = bmc.virtual_cd(USER, PASSWORD).await.unwrap();
    assert_eq!(cd["Inserted"], false, "{cd}");
    assert!(claims::claim_of(&inventory(client, ns, &name).await).is_none());
    assert_eq!(reqwest::get(&media_url).await.unwrap().status(), 404);
    site.operator.terminate();
}

/// A `PUT` of the wipe's report from `source` (a loopback address of the test).
async fn report_wipe(url: &str, source: &str) -> reqwest::StatusCode {
    reqwest::Client::builder()
        .local_address(source.parse::<std::net::IpAddr>().unwrap())
        .no_proxy()
        .build()
        .unwrap()
        .put(url)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_server_is_booted_into_the_wipe_image_and_freed_only_once_it_reported() {
    let site = Site::start().await;
    let (client, ns) = (&site.client, site.ns.as_str());
    let boot = site.boot_url();
    let wiping = |image: Option<WipeImage>| {
        InventoryCloud::new(
            client.clone(),
            Settings {
                wipe: WipePolicy::Metadata,
                wipe_image: image,
                // Each delete waits this long for the report, then answers "not yet".
                off_wait: Duration::from_secs(3),
                ..site.booting(json!({"rack": "a"}))
            },
        )
        .unwrap()
    };

    // A wipe asked for with no wipe image to boot: refused before anything is taken.
    let refused = wiping(None)
        .create_server(&request("w0"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Error::Validation { .. })
            && refused.to_string().contains("--wipe-kernel-url"),
        "{refused}"
    );
    assert!(
        claim_jobs(client, ns).await.is_empty(),
        "a refused create sent a Job"
    );

    let image = WipeImage {
        kernel: url::Url::parse("http://127.0.0.1:9/wipe/vmlinuz").unwrap(),
        initrd: url::Url::parse("http://127.0.0.1:9/wipe/initrd.img").unwrap(),
    };
    let cloud = wiping(Some(image));
    let server = cloud.create_server(&request("w1")).await.unwrap();
    let name = server.id.split_once('/').unwrap().1.to_owned();
    let bmc = site.bmc(&server.id);
    let address = server.addresses[0].address.clone();
    wait_for(&format!("{name} booted"), WAIT, || async {
        let active = cloud.get_server(&server.id).await.unwrap().state == ServerState::Active;
        (active && all_completed(&claim_jobs(client, ns).await)).then_some(())
    })
    .await;
    let patches_installed = boot_patches(bmc);

    // The delete boots the server into the wipe image, and answers "not yet" while it runs:
    // the server stays on, claimed, with its address.
    let mut waiting = Vec::new();
    for _ in 0..3 {
        waiting.push(cloud.delete_server(&server.id).await.unwrap_err());
    }
    for answer in &waiting {
        assert!(
            matches!(answer, Error::Transient { .. }) && answer.to_string().contains("being wiped"),
            "{answer}"
        );
    }
    let s = wait_for(
        &format!("{name} network-booted for its wipe"),
        WAIT,
        || async {
            let s = system(bmc).await;
            (boot_patches(bmc) == patches_installed + 1 && s["PowerState"] == "On").then_some(s)
        },
    )
    .await;
    assert_eq!(s["Boot"]["BootSourceOverrideTarget"], "Pxe", "{s}");
    let held = inventory(client, ns, &name).await;
    assert!(
        claims::claim_of(&held).is_some(),
        "released before its wipe"
    );
    assert!(
        allocations(client, ns)
            .await
            .contains(&(address.clone(), name.clone())),
        "the address of {name} was freed before its wipe"
    );
    // Being released: not adopted by a create of the same hostname, not found, not reinstalled.
    let adopt = cloud.create_server(&request("w1")).await.unwrap_err();
    assert!(matches!(adopt, Error::Conflict { .. }), "{adopt}");
    assert!(cloud.find_server(OWNER, "w1").await.unwrap().is_none());
    let reinstall = cloud
        .reinstall(&server.id, &Default::default())
        .await
        .unwrap_err();
    assert!(matches!(reinstall, Error::Conflict { .. }), "{reinstall}");
    // The boot server hands it the wipe image with its orders, its address and where to report.
    let report = format!("{boot}/wiped/{ns}/{name}");
    let script = reqwest::get(format!("{boot}/boot/{}", server.macs()[0]))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        script.starts_with("#!ipxe\n")
            && script.contains("kernel http://127.0.0.1:9/wipe/vmlinuz initrd=initrd.img ")
            && script.contains(&format!(
                "ip={address}::10.31.0.1:255.255.255.248::netboot:off"
            ))
            && script.contains(" ingot.wipe=metadata ")
            && script.contains(&format!(" ingot.report={report}\n"))
            && script.contains("initrd http://127.0.0.1:9/wipe/initrd.img\n"),
        "{script}"
    );

    // A report from anywhere but the server's address (or an allowed source) is refused.
    assert_eq!(
        report_wipe(&report, "127.0.0.2").await,
        reqwest::StatusCode::FORBIDDEN
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let still = cloud.delete_server(&server.id).await.unwrap_err();
    assert!(still.to_string().contains("being wiped"), "{still}");
    assert_eq!(system(bmc).await["PowerState"], "On");

    // Its report: the release goes on, off read back, then the claim and the address go.
    assert_eq!(
        report_wipe(&report, "127.0.0.1").await,
        reqwest::StatusCode::ACCEPTED
    );
    wait_for(&format!("{name} released"), WAIT, || async {
        cloud.delete_server(&server.id).await.ok()
    })
    .await;
    assert_eq!(system(bmc).await["PowerState"], "Off");
    let released = inventory(client, ns, &name).await;
    assert!(claims::claim_of(&released).is_none());
    assert!(
        !released
            .annotations()
            .keys()
            .any(|k| k.starts_with("onprem.ingot.dev/")),
        "{:?}",
        released.annotations()
    );
    assert!(
        !allocations(client, ns)
            .await
            .iter()
            .any(|(_, owner)| *owner == name),
        "the address of {name} is still held"
    );
    // One wipe boot in all, however many deletes asked.
    assert_eq!(boot_patches(bmc), patches_installed + 1);
    site.boots(&server.macs()[0], BOOT_FROM_DISK).await;

    // A wipe boot that fails (the BMC refuses ingot's credentials): each delete says so and
    // keeps the claim, and nothing is sent again; once the BMC is mended and that Job deleted
    // (as the message says), the next delete sends the wipe boot once more.
    let second = cloud.create_server(&request("w2")).await.unwrap();
    let second_name = second.id.split_once('/').unwrap().1.to_owned();
    let second_bmc = site.bmc(&second.id);
    wait_for(&format!("{second_name} booted"), WAIT, || async {
        let active = cloud.get_server(&second.id).await.unwrap().state == ServerState::Active;
        (active && all_completed(&claim_jobs(client, ns).await)).then_some(())
    })
    .await;
    let patches_before = boot_patches(second_bmc);
    let set_password = |password: &'static str| async move {
        Api::<Secret>::namespaced(client.clone(), ns)
            .patch(
                "bmc",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"password": password}})),
            )
            .await
            .unwrap();
    };
    set_password("not-the-password").await;
    let failed = wait_for("the wipe boot to fail", WAIT, || async {
        match cloud.delete_server(&second.id).await {
            Err(e @ Error::Validation { .. }) => Some(e),
            _ => None,
        }
    })
    .await;
    assert!(
        failed.to_string().contains("the wipe boot of Inventory")
            && failed.to_string().contains("delete that Job"),
        "{failed}"
    );
    let again = cloud.delete_server(&second.id).await.unwrap_err();
    assert!(matches!(again, Error::Validation { .. }), "{again}");
    assert_eq!(
        boot_patches(second_bmc),
        patches_before,
        "a failed wipe boot was sent again"
    );
    assert!(claims::claim_of(&inventory(client, ns, &second_name).await).is_some());
    set_password(PASSWORD).await;
    let wipe_job =
        inventory(client, ns, &second_name).await.annotations()["onprem.ingot.dev/wipe-job"]
            .clone();
    Api::<Job>::namespaced(client.clone(), ns)
        .delete(&wipe_job, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &format!("{second_name} network-booted for its wipe again"),
        WAIT,
        || async {
            let _ = cloud.delete_server(&second.id).await;
            let s = system(second_bmc).await;
            (boot_patches(second_bmc) == patches_before + 1 && s["PowerState"] == "On")
                .then_some(())
        },
    )
    .await;
    let second_report = format!("{boot}/wiped/{ns}/{second_name}");
    assert_eq!(
        report_wipe(&second_report, "127.0.0.1").await,
        reqwest::StatusCode::ACCEPTED
    );
    wait_for(&format!("{second_name} released"), WAIT, || async {
        cloud.delete_server(&second.id).await.ok()
    })
    .await;
    assert!(claims::claim_of(&inventory(client, ns, &second_name).await).is_none());
    assert_eq!(boot_patches(second_bmc), patches_before + 1);
    site.operator.terminate();
}
